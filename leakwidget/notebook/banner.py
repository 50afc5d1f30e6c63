"""What the dashboard says: a one-line headline, the details under it, and the note.

The headline answers the user's question at a glance — the kind, the rate (per iteration and per
hour), the time until memory runs out — in a colour that matches it: red only for a leak, violet
for memory the allocator keeps (growing, but not held by the user's code), orange for a plateau,
green for stable, grey for inconclusive, blue while running. Everything else (the verdict's full
sentence with its interval, why the run stopped, what is growing, what to do next) goes in the
details, collapsed under the headline.

Pure functions of what the engine reports; :mod:`tests.test_words` checks every sentence here
against its numbers.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.attribution.result import Attribution
from ..engine.kinds import StopReason, shown_kind
from ..engine.result import WatchResult
from ..engine.search import BisectResult, Configuration
from ..engine.units import format_bytes, format_duration
from ..engine.verdict import RETENTION_PREFIX, Verdict, exhaust_at, unsettled_prefix
from ..engine.workers.compare import CompareResult
from ..report.colours import KIND_COLOURS
from ..report.comparison import ANSWER_COLOURS

COLOURS = {**KIND_COLOURS, **ANSWER_COLOURS}  # a verdict's, or a comparison's answer's

STOPPED: dict[StopReason, str] = {
    "iterations": "It ran the iterations it was given.",
    "seconds": "It ran for the time it was given.",
    "confident": "It stopped once the verdict was clear.",
    "interrupted": "It was interrupted.",
    "error": "It stopped because the step raised an exception.",
    "memory-guard": "It stopped before memory ran out (the memory guard).",
    "stopped": "You stopped it.",
    "worker-died": "Its worker process ended without a result.",
    "ended": "What it watched ran to its end.",
}


@dataclass(frozen=True)
class Banner:
    """What the banner shows: the kind (its colour), the headline, the details' paragraphs."""

    kind: str  # leak | retention | plateau | stable | inconclusive | running, or an answer's kind
    headline: str
    details: tuple[str, ...] = field(default=())
    log: str = ""  # what worker processes wrote to stderr (a comparison's), shown as it is


def per_hour(slope: float, seconds_per_iteration: float | None) -> str:
    """' (+1.2 GiB per hour)' for a slope per iteration, or '' when the pace is unknown."""
    if not seconds_per_iteration or seconds_per_iteration <= 0:
        return ""
    return f" ({format_bytes(slope * 3600.0 / seconds_per_iteration, signed=True)} per hour)"


def pace(index: np.ndarray, end: np.ndarray, since: float = 0.0) -> float | None:
    """Seconds per iteration from ``since`` on, as the wall clock saw them (None: unknown)."""
    keep = index >= since
    if keep.sum() < 2:
        keep = np.ones(index.size, bool)
    i, t = index[keep], end[keep]
    if i.size < 2 or i[-1] <= i[0] or t[-1] <= t[0]:
        return None
    return float((t[-1] - t[0]) / (i[-1] - i[0]))


def _ms(seconds: float) -> str:
    """'2.68 ms', '51 ms', '1,234 ms': never 1.23e+03."""
    ms = seconds * 1000.0
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"


def _grown(v: Verdict) -> float:
    """What a plateau's fill (or a stable run's one rise) added: its fit's rise."""
    return float(v.fit[1][1] - v.fit[0][1]) if len(v.fit) >= 2 else 0.0


def verdict_headline(v: Verdict, kind: str) -> str:
    """The headline of a verdict; ``kind`` is what is shown ("retention" for a leak of memory
    the allocator keeps)."""
    rate = f"{format_bytes(v.slope, signed=True)}/iteration"
    if kind == "retention":
        return f"Growing: memory kept by the allocator, not by your code ({rate})"
    if v.kind == "leak":
        if v.reason == "python-blocks":
            return f"Leak of Python objects: about {rate}; RSS has not grown yet"
        if v.reason == "heap-in-use":
            return f"Leak: {rate} in use; RSS has not grown yet"
        line = f"Leak: {rate}"
        if v.exhaust_seconds is not None:
            line += f" \u00b7 out of memory in ~{format_duration(v.exhaust_seconds)}"
        elif v.exhaust_iterations is not None:
            line += f" \u00b7 out of memory in ~{v.exhaust_iterations:,.0f} iterations"
        return line
    if v.kind == "plateau":
        then = ("then slowed (a slower leak not ruled out yet)" if v.reason == "tail unsure"
                else "then stopped" if v.slope_low <= 0 else f"then slowed to {rate}")
        return f"Plateau: memory grew by {format_bytes(_grown(v))}, {then} \u2014 a buffer or cache filling up"
    if v.kind == "stable":
        if len(v.fit) >= 3:
            return f"Stable: memory rose once by {format_bytes(_grown(v))}, then stayed flat"
        return f"Stable: no growth ({rate})"
    if v.reason == "no data":
        return "No iteration finished"
    if v.reason == "too few iterations":
        ran = "1 iteration is" if v.iterations == 1 else f"{v.iterations:,} iterations are"
        return f"Inconclusive: {ran} too few to tell"
    return f"Inconclusive after {v.iterations:,} iterations: no clear trend yet \u2014 run longer"


def _verdict_sentence(result: WatchResult) -> str:
    # For retention (or an unsettled reading) the headline says whose memory it is: beside it,
    # the verdict's sentence gives the numbers of the growth, not the word "leak".
    if result.unsettled:
        return result.summary.removeprefix(unsettled_prefix(result.attribution.kept_unsettled))
    return result.summary.removeprefix(RETENTION_PREFIX)


def final_banner(result: WatchResult) -> Banner:
    """The banner of a finished run."""
    v = result.verdict
    kind = shown_kind(v.kind, result.reading, result.copying)
    cols = {k: np.asarray(result.column(k), dtype=float) for k in ("index", "end")}
    sec = pace(cols["index"], cols["end"], float(v.onset if v.onset is not None else v.warmup))
    headline = result.copy_on_write.headline if result.copying else verdict_headline(v, kind)
    if kind == "retention" and result.attribution.kind == "garbage":
        headline = (f"Growing: garbage awaiting Python's cycle collector, not kept by your code "
                    f"({format_bytes(v.slope, signed=True)}/iteration)")
    elif result.unsettled:
        headline = (f"Growing: mostly garbage awaiting Python's cycle collector; up to "
                    f"{format_bytes(result.attribution.kept_unsettled, signed=True)}/iteration may "
                    "be kept past it, too soon to call \u2014 run longer")
    # A leak behind much garbage runs memory out at its own rate, not at RSS's (the sawtooth).
    behind = result.attribution.kept_behind if kind == "leak" and result.attribution else None
    if behind is not None:
        headline = f"Leak: {format_bytes(behind, signed=True)}/iteration kept past the garbage"
        iterations, seconds = exhaust_at(v, behind)
        if seconds is not None:
            headline += f" \u00b7 out of memory in ~{format_duration(seconds)}"
        elif iterations is not None:
            headline += f" \u00b7 out of memory in ~{iterations:,.0f} iterations"
    if result.error is not None:
        headline = f"The step raised {type(result.error).__name__} after {result.iteration_count:,} iterations"
    details = [_verdict_sentence(result)]
    if v.kind == "leak" and sec:
        rate = v.slope if behind is None else behind
        details.append(f"Rate: {format_bytes(rate, signed=True)} per iteration{per_hour(rate, sec)}, "
                       f"at {_ms(sec)} per iteration.")
    ran = f"{result.iteration_count:,} iterations in {elapsed(result.elapsed)}."
    details.append(f"{ran} {STOPPED.get(result.stopped, '')}".strip() if result.stopped else ran)
    if result.error is not None:
        details.append(f"The step raised {type(result.error).__name__}: {result.error}")
    att = result.attribution
    if att is not None and att.kind != "none" and att.summary:
        details.append(att.summary)
        details.extend(_evidence(att))
        details.extend(att.notes[:3])
    details.extend(_advice(result, kind))
    return Banner(kind, headline, tuple(d for d in details if d))


def _evidence(att: Attribution) -> list[str]:
    """What keeps the growth alive (reference paths) and where native memory was allocated
    (memray's call stacks), the few biggest; the full tables are in the text report."""
    out = [f"Kept alive by: {p.text}" for p in att.paths[:3]]
    out += [f"Native call stack: {format_bytes(n.bytes_per_iteration)}/iteration allocated and not "
            f"freed at {n.where}" for n in att.native_sites[:3]]
    return out


def _advice(result: WatchResult, kind: str) -> list[str]:
    v = result.verdict
    # Bisect repeats the step: not for code that drives its own iterations (a training run).
    if kind == "leak" and result.spec.repeatable and any(s.toggleable for s in result.stages):
        return ["Bisect runs the step with pipeline stages switched off to find the one that leaks."]
    if v.kind == "inconclusive" and v.reason not in ("no data",):
        return ["Run longer (-t SECONDS) for a clear answer."]
    if result.unsettled and (result.spec.seconds is not None or result.spec.iterations is not None):
        # With the length left to it, the garbage phase goes on until it can call the kept part.
        return ["Watch without -t or -n: the phase after the run then goes on, within the 60 s "
                "default budget, until it can call what is kept past the garbage a leak or not."]
    return []


def elapsed(seconds: float) -> str:
    """'0.4 s', '12 s', '3 min': a run's length as people say it."""
    return f"{seconds:.1f} s" if seconds < 10 else format_duration(seconds)


def live_banner(label: str, iterations: int, seconds: float, v: Verdict) -> Banner:
    """The banner while a run goes on: where it is, and the live verdict once it is decided."""
    where = f"Running {label}: {iterations:,} iterations, {elapsed(seconds)}"
    if v.kind in ("leak", "plateau", "stable") and v.iterations:
        rate = f"{format_bytes(v.slope, signed=True)}/iteration"
        return Banner(v.kind, f"{where} \u00b7 so far: {v.kind}, {rate}", (v.summary,))
    return Banner("running", f"{where} \u00b7 {'no clear answer yet' if v.iterations else 'too early to tell'}", ())


def _slope_with(configs: Sequence[Configuration], culprits: set[str], on: bool) -> float | None:
    """The slope of the run that had every culprit on (``on``) or off, closest to the baseline."""
    for c in configs:
        if c.verdict is None or c.error:
            continue
        off = set(c.toggles.off) | set(c.toggles.serial)
        if on and not (off & culprits) or not on and culprits <= off:
            return c.slope
    return None


def bisect_banner(result: BisectResult) -> Banner:
    """The answer of a bisection as the headline; its summary and table in the details."""
    ids = [s.id for s in result.culprits]
    details = (result.summary, *result.notes)
    if result.outside:
        slope = _slope_with(result.configurations, set(), on=True)
        grows = f" ({format_bytes(slope, signed=True)}/it)" if slope is not None else ""
        return Banner("leak", f"Not a pipeline stage: memory grows with every stage off too{grows}", details)
    if not ids:
        kind = "inconclusive" if result.leak else (result.configurations[0].kind if result.configurations else "")
        return Banner(kind or "inconclusive", "Bisect found no culprit" + (
            "" if result.leak else ": the run with every stage on did not leak"), details)
    on = _slope_with(result.configurations, set(ids), on=True)
    off = _slope_with(result.configurations, set(ids), on=False)
    word = "Culprit" if len(ids) == 1 else "Culprits"
    them = "it" if len(ids) == 1 else "them"
    numbers = []
    if on is not None:
        numbers.append(f"{format_bytes(on, signed=True)}/it with {them} on")
    if off is not None:
        numbers.append(f"{format_bytes(off, signed=True)}/it with {them} off")
    what = f" ({', '.join(numbers)})" if numbers else ""
    base = result.configurations[0].verdict if result.configurations else None
    climbing = bool(result.plateau and base is not None and base.climbing)  # no plateau yet
    rise = " of the rise" if climbing else " of the plateau" if result.plateau else ""
    kind = "inconclusive" if climbing else "plateau" if result.plateau else "leak"
    return Banner(kind, f"{word}{rise}: {' + '.join(ids)}{what}", details)


def banner_html(banner: Banner, *, running: bool, verdict: str = "") -> str:
    """The headline as the banner's HTML; ``data-kind`` is the shown kind, ``data-verdict`` the
    verdict's own."""
    colour = COLOURS.get(banner.kind, KIND_COLOURS["inconclusive"])
    return (
        f'<div class="leakwidget-verdict" data-kind="{html.escape(banner.kind)}" '
        f'data-verdict="{html.escape(verdict or banner.kind)}" data-running="{str(running).lower()}" '
        f'style="background:{colour};color:white;padding:6px 10px;border-radius:4px;font-size:13px;'
        f'line-height:1.4;font-weight:bold">'
        f'<span class="leakwidget-headline">{html.escape(banner.headline)}</span></div>'
    )


def details_html(paragraphs: Sequence[str], log: str = "") -> str:
    body = "".join(f"<p style=\"margin:0 0 4px\">{html.escape(p)}</p>" for p in paragraphs)
    if log.strip():
        body += ('<p style="margin:8px 0 2px;font-weight:bold">What the workers wrote to stderr</p>'
                 '<pre class="leakwidget-worker-log" style="max-height:240px;overflow:auto;font-size:11px;'
                 f'background:#f6f6f6;padding:6px;margin:0;white-space:pre-wrap">{html.escape(log)}</pre>')
    return f'<div class="leakwidget-details-text" style="font-size:13px;line-height:1.45">{body}</div>'


def note_html(text: str) -> str:
    return f'<div style="color:#555;font-size:12px">{html.escape(text)}</div>' if text else ""


def compare_banner(result: CompareResult) -> Banner:
    """A comparison's answer as the headline, in the answer's own colour (never a variant's
    verdict); the details: each variant's verdict sentence, the notes, the workers' stderr. The
    table and how to apply the fix are the dashboard's compare pane (report.comparison)."""
    details = [f"{row['variant']}: {row['summary']}" for row in result.rows()]
    return Banner(result.answer.kind, result.answer.headline, (*details, *result.notes), result.worker_log)
