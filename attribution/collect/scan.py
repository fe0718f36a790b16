"""Finding the lines of a file that any rule could care about, without looking at the others.

The rule set compiles its patterns into one prefilter (see extract.Prefilter). A collector hands each block of
the file to it and gets back the offsets of possible matches; only those lines are decoded and parsed. This
keeps a 1 GB job log at the speed of one linear-time regex pass.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator, Protocol

from attribution.frozen import Value
from attribution.collect.textio import BLOCK_SIZE, ReadStats, line_bounds, read_blocks


class Prefilter(Protocol):
    def find(self, block: bytes, end: int | None = None) -> list[int]:
        """Sorted start offsets of possible matches in `block[:end]`."""


class Hit(Value):
    """A line of a block that the prefilter flagged: its number and bounds within the block."""

    lineno: int
    start: int
    end: int
    block: bytes
    stop: int  # where the block's lines end (block[stop:] belongs to the next block)

    @property
    def raw(self) -> bytes:
        return self.block[self.start:self.end]


def scan(fp: BinaryIO, stats: ReadStats, prefilter: Prefilter, block_size: int = BLOCK_SIZE) -> Iterator[Hit]:
    """Every line of `fp` with a prefilter hit, once, in file order, with its 1-based line number. Counts the
    file's lines (stats.lines) in the same pass: the newlines before each hit, then the rest of the block."""
    for block, stop in read_blocks(fp, stats, block_size):
        base = stats.lines + 1
        pos = 0
        seen = 0  # newlines in block[:pos]
        last_start = -1
        for off in prefilter.find(block, stop):
            s, e = line_bounds(block, off, stop)
            if s == last_start or s > e:
                continue
            seen += block.count(b"\n", pos, s)
            pos = s
            last_start = s
            yield Hit(base + seen, s, e, block, stop)
        stats.lines += seen + block.count(b"\n", pos, stop)
        if stats.no_final_newline:  # read_blocks' last block: a line without a newline
            stats.lines += 1


def previous_line(block: bytes, start: int) -> tuple[int, int] | None:
    """Bounds of the line before the one starting at `start`, within the block."""
    if start <= 0:
        return None
    end = start - 1
    if end > 0 and block[end - 1:end] == b"\r":
        end -= 1
    s = block.rfind(b"\n", 0, start - 1) + 1
    return s, end


def next_line(block: bytes, end: int, stop: int | None = None) -> tuple[int, int] | None:
    """Bounds of the line after the one ending at `end`, within the block (`block[:stop]`)."""
    stop = len(block) if stop is None else stop
    nl = block.find(b"\n", end, stop)
    if nl < 0 or nl + 1 >= stop:
        return None
    s = nl + 1
    e = block.find(b"\n", s, stop)
    if e < 0:
        e = stop
    if e > s and block[e - 1:e] == b"\r":
        e -= 1
    return s, e
