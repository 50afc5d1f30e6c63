"""What a verdict is, and what the hypotheses hand over to be put into words.

A hypothesis that holds returns a :class:`Finding`: the :class:`Verdict`'s numbers, and a story —
the kind of sentence it calls for, with the numbers that sentence needs beyond the Verdict's own
fields. :mod:`.words` turns the story into the summary and the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..kinds import VerdictKind
from .stats import Trend


@dataclass
class Verdict:
    kind: VerdictKind
    slope: float = 0.0  # bytes per iteration
    slope_low: float = 0.0  # 95% interval
    slope_high: float = 0.0
    onset: int | None = None  # iteration where steady growth starts (leak) or the rise (plateau)
    warmup: int = 0  # iterations treated as warm-up
    exhaust_iterations: float | None = None
    exhaust_seconds: float | None = None
    confident: bool = False
    # Growth that slows down but does not stop: slope is the current rate, earlier_slope the
    # faster one it slowed from (None when not slowing).
    slowing: bool = False
    earlier_slope: float | None = None
    fit: list[tuple[float, float]] = field(default_factory=list)
    # Inconclusive because RSS went flat after a rise while what is in use kept climbing: a
    # fill that is no plateau yet (the reason says what climbed); ``fit`` is the rise's shape.
    climbing: bool = False
    summary: str = ""
    iterations: int = 0
    reason: str = ""

    def __post_init__(self) -> None:
        # Comparisons of numpy numbers give numpy booleans: a saved result must read them back.
        self.confident, self.slowing = bool(self.confident), bool(self.slowing)
        self.climbing = bool(self.climbing)

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return self.summary


@dataclass(frozen=True)
class NoData:
    """No iteration finished."""


@dataclass(frozen=True)
class TooFew:
    """Fewer than MIN_POINTS iterations after the warm-up."""

    after_warmup: int


@dataclass(frozen=True)
class PythonBlocks:
    """Python objects accumulating while RSS does not grow yet."""

    blocks: Trend  # allocator blocks per iteration


@dataclass(frozen=True)
class HeapInUse:
    """Memory malloc handed out and did not get back, accumulating while RSS does not grow yet."""

    in_use: Trend  # bytes in use per iteration


@dataclass(frozen=True)
class Growth:
    """A leak in RSS: the Verdict's slope, onset and projection say it all."""


@dataclass(frozen=True)
class Slowing:
    """A leak whose rate has fallen since ``earlier_onset`` (caches warming up on top of a
    slower leak): the Verdict's slope is the current rate, since iteration ``since``."""

    earlier: Trend  # the rate since ``earlier_onset``
    earlier_onset: float
    since: float


@dataclass(frozen=True)
class Filled:
    """A plateau: memory grew by ``grown`` over iterations ``first``–``last``, flat since —
    or, with ``still``, still growing since, much more slowly (significant at 95%)."""

    grown: float
    first: float
    last: float
    still: bool = False
    exhaust: tuple[float | None, float | None] = (None, None)  # (iterations, seconds) at that rate
    # Not ``still``: the tail's growth since, significant but slow (its exhaust: the memory
    # available used up at that rate), or not significant while its 95% upper bound, over a run
    # as long, would add a quarter of the fill (``unsure``: not ruled out).
    tail_exhaust: tuple[float | None, float | None] = (None, None)
    unsure: bool = False


@dataclass(frozen=True)
class Flat:
    """Stable: no growth after the warm-up."""


@dataclass(frozen=True)
class Creep:
    """Stable: growth significant at 95% but not at the level a leak is decided, so slow that
    even at its 95% upper bound it adds ``most`` over the run, under what a leak must add
    (MIN_LEAK_GROWTH), and would not use the memory available within STABLE_HORIZON_S."""

    most: float


@dataclass(frozen=True)
class StepThenFlat:
    """Stable: one rise under MIN_LEAK_GROWTH over iterations ``first``–``last``, flat since."""

    rise: float
    first: float
    last: float


# Why a verdict is inconclusive, one class per reason.


@dataclass(frozen=True)
class Unexplained:
    """RSS grew in few rises while nothing in use grew: the allocator taking room."""

    grown: float
    rises: float


@dataclass(frozen=True)
class TooLittle:
    """Steady growth, but less than a leak must add."""

    grown: float
    needed: float


@dataclass(frozen=True)
class Levelling:
    """Growth that keeps slowing down but has not stopped: ``current`` since ``since``, down
    from ``earlier`` since the onset; ``exhaust`` (iterations, seconds) at the current rate."""

    current: Trend
    since: float
    earlier: Trend
    exhaust: tuple[float | None, float | None]


@dataclass(frozen=True)
class StillInUse:
    """RSS flat since ``since`` (after a fill, or the warm-up's), while a count of what is in use
    (``what``: malloc's bytes or Python's objects) kept rising at its lows: by ``grown`` bytes,
    about ``rate`` per iteration. RSS is reusing memory freed earlier; it is no plateau yet.
    ``flat``: RSS never rose (the whole window; hypotheses._climbs_under_flat_rss), so it did not
    level off anywhere."""

    since: float
    what: str
    grown: float
    rate: float
    flat: bool = False


@dataclass(frozen=True)
class Unsteady:
    """Significant growth, but not sustained (a jump, or levelling off)."""


@dataclass(frozen=True)
class NotYetSignificant:
    """Growth at 95%, not yet at the level a leak must reach."""


@dataclass(frozen=True)
class Noisy:
    """No significant growth, but the noise ``sigma`` allows a leak up to ``high`` per iteration."""

    sigma: float
    high: float


@dataclass(frozen=True)
class NoFit:
    """Neither a leak, a plateau nor a stable level."""


Doubt = Unexplained | TooLittle | StillInUse | Levelling | Unsteady | NotYetSignificant | Noisy | NoFit
Story = NoData | TooFew | PythonBlocks | HeapInUse | Growth | Slowing | Filled | Flat | StepThenFlat | Doubt


@dataclass(frozen=True)
class Finding:
    verdict: Verdict  # every field but the words (summary, reason)
    story: Story
