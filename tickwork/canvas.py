"""A small raster canvas written as a PNG with the standard library only (zlib + struct).

tickwork draws its figures (`tickwork eval chart`, the benchmarks' plots in ops/bench)
without a plotting library, which it does not depend on. Text uses a 3x5 pixel font:
digits, letters (drawn the same in either case) and the punctuation labels need.
"""

from __future__ import annotations

import struct
import zlib

RGB = tuple[int, int, int]

BLACK: RGB = (0, 0, 0)
WHITE: RGB = (255, 255, 255)
GREY: RGB = (200, 200, 200)

#: 3x5 glyphs, rows top to bottom; an unknown character draws as a blank
GLYPHS = {
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
    "a": "010101111101101",
    "b": "110101110101110",
    "c": "011100100100011",
    "d": "110101101101110",
    "e": "111100110100111",
    "f": "111100110100100",
    "g": "011100101101011",
    "h": "101101111101101",
    "i": "111010010010111",
    "j": "001001001101010",
    "k": "100101110101101",
    "l": "100100100100111",
    "m": "101111111101101",
    "n": "110101101101101",
    "o": "010101101101010",
    "p": "110101110100100",
    "q": "010101101110011",
    "r": "110101110101101",
    "s": "011100010001110",
    "t": "111010010010010",
    "u": "101101101101111",
    "v": "101101101101010",
    "w": "101101111111101",
    "x": "101101010101101",
    "y": "101101010010010",
    "z": "111001010100111",
    ".": "000000000000010",
    ",": "000000000010100",
    ":": "000010000010000",
    "-": "000000111000000",
    "_": "000000000000111",
    "+": "000010111010000",
    "/": "001001010100100",
    "%": "101001010100101",
    "$": "011110010011110",
    "(": "010100100100010",
    ")": "010001001001010",
    "=": "000111000111000",
    "#": "101111101111101",
    "*": "000101010101000",
    "?": "111001010000010",
    "!": "010010010000010",
    "'": "010010000000000",
    " ": "000000000000000",
}
#: pixels a character takes across at scale 1 (3 for the glyph, 1 between)
ADVANCE = 4


class Canvas:
    """An RGB image in memory, drawn on pixel by pixel."""

    def __init__(self, width: int, height: int, background: RGB = WHITE) -> None:
        if not (0 < width <= 10_000 and 0 < height <= 10_000):
            raise ValueError(f"a canvas is 1 to 10000 pixels each way, got {width}x{height}")
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

    def vline(self, x: int, y0: int, y1: int, colour: RGB, dash: int = 0) -> None:
        for y in range(y0, y1 + 1):
            if not dash or (y // dash) % 2 == 0:
                self.dot(x, y, colour)

    def text(self, x: int, y: int, text: str, colour: RGB = BLACK, scale: int = 2) -> None:
        for n, char in enumerate(text.lower()):
            glyph = GLYPHS.get(char, GLYPHS[" "])
            for i, bit in enumerate(glyph):
                if bit == "1":
                    self.dot(
                        x + n * ADVANCE * scale + (i % 3) * scale,
                        y + (i // 3) * scale,
                        colour,
                        scale,
                    )

    def png(self) -> bytes:
        """The image as PNG bytes: 8-bit RGB, no filter, one zlib stream."""
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


def text_width(text: str, scale: int = 2) -> int:
    """Pixels `text` takes across at `scale`."""
    return max(0, len(text) * ADVANCE * scale - scale)


def label(value: float) -> str:
    """A tick label: a number, thousands as `k`."""
    return (
        f"{value / 1000:g}k"
        if value >= 1000 and value % 1000 == 0 and value < 1e6
        else f"{value:g}"
    )
