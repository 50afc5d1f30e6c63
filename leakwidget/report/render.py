"""How a result is drawn: renderers, chosen through one small Protocol (as memray's reporters).

A renderer turns a finished result into a document of one media type. Whoever shows a result
picks the renderers it needs and imports them where it does — nothing is registered anywhere:
a ``WatchResult`` shows its chart (:data:`.svg.CHART`) beside its text in a notebook and writes
its page (:data:`.html.PAGE`) in ``save_html``; a ``CompareResult`` shows its overlaid chart
(:data:`.compare.CHART`); the dashboard shows its last result's bundle; ``leakwidget report``
writes the page of a saved result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Renderer(Protocol[T_contra]):
    """Draws a result as a document of one media type."""

    @property
    def mime(self) -> str: ...

    def render(self, result: T_contra) -> str: ...


@dataclass(frozen=True)
class Drawing(Generic[T]):
    """A renderer made of a media type and the function that draws."""

    mime: str
    draw: Callable[[T], str]

    def render(self, result: T) -> str:
        return self.draw(result)


def mimebundle(result: Any, renderers: Iterable[Renderer[Any]]) -> dict[str, str]:
    """What a notebook shows of ``result``: its text, and what each renderer draws. A picture
    that cannot be drawn leaves the text alone: the text report must always show."""
    bundle = {"text/plain": str(result)}
    for renderer in renderers:
        try:
            bundle[renderer.mime] = renderer.render(result)
        except Exception:  # the text report is the part that must always show
            pass
    return bundle
