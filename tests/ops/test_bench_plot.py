"""The benchmarks' scatter plot draws on `tickwork.canvas`, the canvas `tickwork eval chart`
uses: it still writes a PNG with the points where they belong."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from ops.bench import plot


def test_scatter_writes_a_png_with_its_points(tmp_path: Path) -> None:
    out = tmp_path / "plot.png"
    red = (200, 0, 0)
    plot.scatter(
        out, [([(500.0, 50.0)], red)], x_max=1000, y_max=100, x_ticks=[0, 1000], y_ticks=[0, 100]
    )
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (900, 360)
    (length,) = struct.unpack(">I", png[33:37])
    raw = zlib.decompress(png[41 : 41 + length])
    # the point at (500, 50): half the plot across, half up (margins 60, 10, 10, 30)
    x, y = 60 + round(0.5 * 830), 10 + 320 - round(0.5 * 320)
    at = y * (1 + 3 * width) + 1 + 3 * x
    assert tuple(raw[at : at + 3]) == red
