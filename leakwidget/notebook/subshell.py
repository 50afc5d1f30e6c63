"""Clicks during a synchronous cell (``model.fit``): a widget's messages handled in a subshell.

A kernel runs a cell's code and handles widget clicks (comm messages) on the same thread, so a
click on Stop while ``model.fit`` runs would wait until the cell ends — too late to stop it.
:mod:`.delivery` solves this for ``%%leakwatch`` cells by making them awaitable; a Keras ``fit``
cannot be made so. ipykernel 7 runs *subshells*: threads with their own event loop that handle
shell messages concurrently with the main one. Its shell-channel thread sends a comm message to
the subshell the comm last published from (``BaseComm._reply_subshell_for``, so a reply reaches
the loop waiting for it). :func:`route_to_subshell` points a widget's comm at a subshell of our
own, so its click handler runs in that thread at once, whatever the main thread is doing
(measured: Stop reaches a training loop within ~50 ms, ``tests/test_keras.py``).

The route lasts until the widget next sends a message from the main thread (which re-routes it
there), so callers re-assert it between steps (:meth:`Route.refresh`). Where the kernel has no
subshells (ipykernel < 7, another kernel), :func:`route_to_subshell` returns None and the
dashboard keeps its note that clicks arrive only after the cell.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from IPython import get_ipython

from .delivery import in_kernel

_subshells: dict[int, str] = {}  # id(kernel) -> the subshell leakwidget created in it


class Route:
    """The widgets whose clicks a subshell handles; ``refresh()`` between steps, ``close()``
    at the end."""

    def __init__(self, comms: list[Any], subshell_id: str) -> None:
        self.comms = comms
        self.subshell_id = subshell_id
        self.refresh()

    def refresh(self) -> None:
        for comm in self.comms:
            # ipykernel's BaseComm keeps the subshell of its last message here and routes the
            # front end's messages for this comm to it.
            comm._reply_subshell_id = self.subshell_id

    def close(self) -> None:
        for comm in self.comms:
            comm._reply_subshell_id = None


def route_to_subshell(*widgets: Any) -> Route | None:
    """Handle these widgets' front-end messages in a kernel subshell, or None where the kernel
    cannot."""
    shell = get_ipython()
    if not in_kernel(shell):
        return None
    kernel = shell.kernel
    subshell_id = _subshell(kernel)
    if subshell_id is None:
        return None
    comms = [w.comm for w in widgets if getattr(w, "comm", None) is not None]
    if not all(hasattr(c, "_reply_subshell_for") for c in comms):
        return None  # a comm implementation that does not route by subshell
    return Route(comms, subshell_id)


def _subshell(kernel: Any) -> str | None:
    """leakwidget's subshell in this kernel, created once (it idles until a click comes)."""
    if id(kernel) in _subshells:
        return _subshells[id(kernel)]
    channel = getattr(kernel, "shell_channel_thread", None)
    if channel is None or not getattr(kernel, "_supports_kernel_subshells", False):
        return None
    created: concurrent.futures.Future[str] = concurrent.futures.Future()

    def create() -> None:  # on the shell-channel thread, which owns the subshell table
        try:
            created.set_result(channel.manager._create_subshell())
        except BaseException as exc:
            created.set_exception(exc)

    try:
        channel.io_loop.add_callback(create)
        subshell_id = created.result(timeout=5)
    except Exception:
        return None
    _subshells[id(kernel)] = subshell_id
    return subshell_id
