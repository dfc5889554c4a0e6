"""Cost against success as a PNG: one point a run, its total cost across, the share of its
tasks repaired up; each point labelled with its model (or `--label`) and run id. Drawn on
`tickwork.canvas` with the standard library only."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tickwork.canvas import BLACK, GREY, RGB, Canvas, label, text_width

from .model import Run, totals

WIDTH, HEIGHT = 900, 540
#: the points' colours, in the order of the runs given
PALETTE: tuple[RGB, ...] = (
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (148, 103, 189),
    (255, 127, 14),
    (23, 190, 207),
    (140, 86, 75),
    (227, 119, 194),
)
MAX_RUNS = 50


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above `value` (1 for none)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value * (1 - 1e-9))


def points(runs: Sequence[Run]) -> list[tuple[str, float, float]]:
    """(label, total cost in USD, percent of tasks repaired) for each run."""
    made = []
    for run in runs:
        t = totals(run.results)
        made.append((f"{run.label} {run.id[-4:]}", t.cost_usd, 100.0 * t.success_rate))
    return made


def chart(runs: Sequence[Run], *, width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """The PNG bytes of the chart of `runs`."""
    if not runs:
        raise ValueError("a chart needs at least one run")
    if len(runs) > MAX_RUNS:
        raise ValueError(f"a chart shows at most {MAX_RUNS} runs, got {len(runs)}")
    found = points(runs)
    x_max = nice_ceiling(max(cost for _, cost, _ in found) * 1.1)
    left, right, top, bottom = 80, 30, 56, 60
    canvas = Canvas(width, height)
    plot_w, plot_h = width - left - right, height - top - bottom

    def at(x: float, y: float) -> tuple[int, int]:
        return left + round(x / x_max * plot_w), top + plot_h - round(y / 100.0 * plot_h)

    canvas.text(left, 10, "cost against success", scale=3)
    for step in range(6):
        y = 20.0 * step
        py = at(0, y)[1]
        canvas.hline(left - 4, left, py, BLACK)
        if step:
            canvas.hline(left + 1, left + plot_w, py, GREY, dash=3)
        tick = f"{label(y)}%"
        canvas.text(left - 8 - text_width(tick), py - 5, tick)
    for step in range(6):
        x = x_max * step / 5
        px = at(x, 0)[0]
        canvas.vline(px, top + plot_h, top + plot_h + 4, BLACK)
        if step:
            canvas.vline(px, top, top + plot_h - 1, GREY, dash=3)
        tick = f"${x:.4g}"
        canvas.text(px - text_width(tick) // 2, top + plot_h + 10, tick)
    canvas.vline(left, top, top + plot_h, BLACK)
    canvas.hline(left, left + plot_w, top + plot_h, BLACK)
    caption = "total cost (usd)"
    canvas.text(left + (plot_w - text_width(caption)) // 2, height - 22, caption)
    canvas.text(8, top - 28, "repaired", scale=2)
    for n, (name, cost, success) in enumerate(found):
        colour = PALETTE[n % len(PALETTE)]
        px, py = at(cost, success)
        canvas.dot(px - 4, py - 4, colour, 9)
        shown = name[:40]
        tx = px + 10 if px + 10 + text_width(shown) < width else px - 10 - text_width(shown)
        canvas.text(tx, max(top, min(py - 5 + 12 * (n % 2), top + plot_h - 12)), shown, colour)
    return canvas.png()
