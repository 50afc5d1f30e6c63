"""The colours every picture of a run shares: the live dashboard, the static charts, the page and
the terminal's progress line say the same thing in the same colour."""

from __future__ import annotations

__all__ = ["KIND_COLOURS", "MIB", "PALETTE", "PHASES"]

# Colour of the verdict banner / picture title by kind ("running" while a watch is live).
KIND_COLOURS = {
    "leak": "#c62828",
    "retention": "#6a1b9a",  # growing, but memory the allocator keeps: not a red "leak"
    "plateau": "#ef6c00",
    "stable": "#2e7d32",
    "inconclusive": "#616161",
    "running": "#1565c0",
}
# One colour per configuration series (Run again, bisection); cycles after ten. No red and no
# orange: those say "leak" and "plateau" (a trend line, a banner), never "the second run".
PALETTE = (
    "#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#393b79", "#637939",
)
# The phases of a run that are shaded (at a quarter of their colour) and named in the legend.
PHASES = {"setup": "#90a4ae", "warm-up": "#bdbdbd"}
MIB = 1024.0 * 1024.0
