"""collect.scan over textio.read_blocks: every line once with its number, however the file is cut into blocks,
read from a seekable file (no copies) or from a pipe (a partial line carried over)."""

from __future__ import annotations

import io

import pytest

from attribution.collect.scan import scan
from attribution.collect.textio import ReadStats, line_bounds

from tests.harness.prefilters import AllLines

LINES = [b"first line", b"second\r", b"", b"with a NUL\0 in the middle", b"x" * 300, b"short", b"last one"]


class _Pipe:
    """A stream that cannot seek (journalctl's output, a pipe)."""

    def __init__(self, data: bytes) -> None:
        self._f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)

    def seekable(self) -> bool:
        return False


def _expected(data: bytes):
    """(line number, record) of every line, from splitting the bytes: a record ends at a NUL, CR LF is a newline."""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines = lines[:-1]
    out = []
    for i, line in enumerate(lines, 1):
        rec = line.split(b"\0")[0]
        out.append((i, rec[:-1] if rec.endswith(b"\r") else rec))
    return out, len(lines)


@pytest.mark.parametrize("final_newline", [True, False])
@pytest.mark.parametrize("block_size", [7, 64, 333, 1 << 20])
@pytest.mark.parametrize("stream", [io.BytesIO, _Pipe])
def test_every_line_once_with_its_number(final_newline, block_size, stream):
    data = b"\n".join(LINES) + (b"\n" if final_newline else b"")
    want, n_lines = _expected(data)
    stats = ReadStats()
    got = [(h.lineno, h.raw) for h in scan(stream(data), stats, AllLines(), block_size=block_size)
           if h.block.rfind(b"\n", 0, h.start) + 1 == h.start]  # the line's first record
    assert got == want  # lines longer than a block too (carried over, or read again)
    assert stats.lines == n_lines
    assert stats.bytes == len(data)
    assert stats.no_final_newline is (not final_newline)
    assert stats.nul_bytes == 1


def test_a_record_ends_at_a_nul_found_only_within_its_line():
    block = b"a\0b\nccc\0d\neee\n" + b"\0" * 5
    assert line_bounds(block, 5) == (4, 7)  # "ccc"
    assert line_bounds(block, 8) == (8, 9)  # "d"
    assert line_bounds(block, 10) == (10, 13)  # "eee": the NULs after its line do not matter
    assert line_bounds(block, 10, 12) == (10, 12)  # nor past the block's end
