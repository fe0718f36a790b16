"""Finding the lines of a file that any rule could care about, without looking at the others.

The rule set compiles its patterns into one prefilter (see extract.Prefilter). A collector hands each block of
the file to it and gets back the offsets of possible matches; only those lines are decoded and parsed. This
keeps a 1 GB job log at the speed of one linear-time regex pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator, Protocol

from attribution.collect.textio import ReadStats, line_bounds, read_blocks


class Prefilter(Protocol):
    def find(self, block: bytes) -> list[int]:
        """Sorted start offsets of possible matches in `block`."""


@dataclass(frozen=True, slots=True)
class Hit:
    lineno: int
    start: int
    end: int
    block: bytes

    @property
    def raw(self) -> bytes:
        return self.block[self.start:self.end]


def scan(fp: BinaryIO, stats: ReadStats, prefilter: Prefilter) -> Iterator[Hit]:
    """Every line of `fp` with a prefilter hit, once, in file order, with its 1-based line number."""
    base = 1
    for block in read_blocks(fp, stats):
        pos = 0
        lineno = base
        last_start = -1
        for off in prefilter.find(block):
            s, e = line_bounds(block, off)
            if s == last_start or s > e:
                continue
            lineno += block.count(b"\n", pos, s)
            pos = s
            last_start = s
            yield Hit(lineno, s, e, block)
        base = stats.lines + 1  # read_blocks counted the block's newlines


def previous_line(block: bytes, start: int) -> tuple[int, int] | None:
    """Bounds of the line before the one starting at `start`, within the block."""
    if start <= 0:
        return None
    end = start - 1
    if end > 0 and block[end - 1:end] == b"\r":
        end -= 1
    s = block.rfind(b"\n", 0, start - 1) + 1
    return s, end


def next_line(block: bytes, end: int) -> tuple[int, int] | None:
    """Bounds of the line after the one ending at `end`, within the block."""
    nl = block.find(b"\n", end)
    if nl < 0 or nl + 1 >= len(block):
        return None
    s = nl + 1
    e = block.find(b"\n", s)
    if e < 0:
        e = len(block)
    if e > s and block[e - 1:e] == b"\r":
        e -= 1
    return s, e
