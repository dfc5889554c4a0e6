"""A scatter plot as a PNG with the standard library only: the benchmarks draw their
figures without matplotlib, which the project does not install (the canvas is
`tickwork.canvas`, which `tickwork eval chart` draws on too)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tickwork.canvas import GREY, RGB, Canvas, label

__all__ = ["RGB", "Canvas", "scatter"]


def scatter(
    path: Path,
    series: Sequence[tuple[Sequence[tuple[float, float]], RGB]],
    *,
    x_max: float,
    y_max: float,
    x_ticks: Sequence[float],
    y_ticks: Sequence[float],
    lines: Sequence[tuple[float, RGB]] = (),
    width: int = 900,
    height: int = 360,
) -> None:
    """Points of each series in its colour, dashed horizontal `lines` at their y, axes with
    tick labels (numbers; thousands as `k`)."""
    left, bottom, top, right = 60, 30, 10, 10
    canvas = Canvas(width, height)
    plot_w, plot_h = width - left - right, height - top - bottom

    def at(x: float, y: float) -> tuple[int, int]:
        return left + round(x / x_max * plot_w), top + plot_h - round(y / y_max * plot_h)

    for y, colour in lines:
        canvas.hline(left, left + plot_w, at(0, y)[1], colour, dash=6)
    canvas.vline(left, top, top + plot_h, (0, 0, 0))
    canvas.hline(left, left + plot_w, top + plot_h, (0, 0, 0))
    for y in y_ticks:
        py = at(0, y)[1]
        canvas.hline(left - 4, left, py, (0, 0, 0))
        canvas.hline(left + 1, left + plot_w, py, GREY, dash=2)
        canvas.text(4, py - 5, label(y))
    for x in x_ticks:
        px = at(x, 0)[0]
        canvas.vline(px, top + plot_h, top + plot_h + 4, (0, 0, 0))
        canvas.text(px - 8, top + plot_h + 10, label(x))
    for points, colour in series:
        for x, y in points:
            px, py = at(x, y)
            canvas.dot(px - 1, py - 1, colour, 3)
    path.write_bytes(canvas.png())
