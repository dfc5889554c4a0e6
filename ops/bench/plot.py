"""A scatter plot as a PNG with the standard library only (zlib + struct): the benchmarks
draw their figures without matplotlib, which the project does not install."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

RGB = tuple[int, int, int]

#: 3x5 glyphs for axis labels: digits and a few letters
_GLYPHS = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
    "k": "100101110101101",
    " ": "000000000000000",
}


class Canvas:
    def __init__(self, width: int, height: int, background: RGB = (255, 255, 255)) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * width * height)

    def dot(self, x: int, y: int, colour: RGB, size: int = 1) -> None:
        for dx in range(size):
            for dy in range(size):
                px, py = x + dx, y + dy
                if 0 <= px < self.width and 0 <= py < self.height:
                    i = 3 * (py * self.width + px)
                    self.pixels[i : i + 3] = bytes(colour)

    def hline(self, x0: int, x1: int, y: int, colour: RGB, dash: int = 0) -> None:
        for x in range(x0, x1 + 1):
            if not dash or (x // dash) % 2 == 0:
                self.dot(x, y, colour)

    def vline(self, x: int, y0: int, y1: int, colour: RGB) -> None:
        for y in range(y0, y1 + 1):
            self.dot(x, y, colour)

    def text(self, x: int, y: int, text: str, colour: RGB = (0, 0, 0), scale: int = 2) -> None:
        for n, char in enumerate(text):
            glyph = _GLYPHS.get(char, _GLYPHS[" "])
            for i, bit in enumerate(glyph):
                if bit == "1":
                    self.dot(
                        x + n * 4 * scale + (i % 3) * scale, y + (i // 3) * scale, colour, scale
                    )

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[3 * y * self.width : 3 * (y + 1) * self.width])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


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

    grey = (200, 200, 200)
    for y, colour in lines:
        canvas.hline(left, left + plot_w, at(0, y)[1], colour, dash=6)
    canvas.vline(left, top, top + plot_h, (0, 0, 0))
    canvas.hline(left, left + plot_w, top + plot_h, (0, 0, 0))
    for y in y_ticks:
        py = at(0, y)[1]
        canvas.hline(left - 4, left, py, (0, 0, 0))
        canvas.hline(left + 1, left + plot_w, py, grey, dash=2)
        canvas.text(4, py - 5, _label(y))
    for x in x_ticks:
        px = at(x, 0)[0]
        canvas.vline(px, top + plot_h, top + plot_h + 4, (0, 0, 0))
        canvas.text(px - 8, top + plot_h + 10, _label(x))
    for points, colour in series:
        for x, y in points:
            px, py = at(x, y)
            canvas.dot(px - 1, py - 1, colour, 3)
    path.write_bytes(canvas.png())


def _label(value: float) -> str:
    return (
        f"{value / 1000:g}k"
        if value >= 1000 and value % 1000 == 0 and value < 1e6
        else f"{value:g}"
    )
