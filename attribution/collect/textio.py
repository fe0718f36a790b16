"""Reading log files without trusting them: bounded memory, any bytes, overlong lines, missing final newline.

A file is read in blocks that end on a line boundary. A line longer than `max_line` bytes is handed over in
pieces so memory stays bounded; NUL bytes (left behind by a crash or a pre-allocated log) separate records.
Only the lines someone asked about are ever decoded.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

from attribution.frozen import Value, field
from attribution.safefile import open_regular  # noqa: F401  (the readers open files through it)


BLOCK_SIZE = 8 << 20
MAX_LINE = 1 << 20
#: Part of a line that is decoded and handed to the rules; real log lines are far shorter.
MAX_RECORD_CHARS = 64 << 10


class ReadStats(Value, frozen=False):
    """What reading a file noticed, for the coverage record."""

    bytes: int = 0
    lines: int = 0
    nul_bytes: int = 0
    long_lines: int = 0
    invalid_utf8_blocks: int = 0
    no_final_newline: bool = False
    notes: list[str] = field(default_factory=list)

    def summary(self) -> list[str]:
        out = list(self.notes)
        if self.nul_bytes:
            out.append(f"{self.nul_bytes} NUL bytes (binary data) skipped")
        if self.invalid_utf8_blocks:
            out.append("invalid UTF-8 replaced")
        if self.long_lines:
            out.append(f"{self.long_lines} line(s) longer than {MAX_LINE} bytes read in pieces")
        if self.no_final_newline and self.bytes:
            out.append("last line has no newline (truncated file?)")
        return out


def read_blocks(fp: BinaryIO, stats: ReadStats, block_size: int = BLOCK_SIZE,
                max_line: int = MAX_LINE) -> Iterator[tuple[bytes, int]]:
    """Yield (block, end): `block[:end]` ends with a newline (except an overlong piece or the file's last line).

    Nothing is copied: the block is the bytes as read. From a seekable file the part after the last newline is
    read again with the next block; from a pipe it is carried over (one partial line copied). Lines are not
    counted here: scan counts them as it looks for hits (one pass)."""
    seekable = _seekable(fp)
    carry = b""
    in_long = False
    while True:
        data = fp.read(block_size)
        if not data:
            if carry:
                stats.no_final_newline = True  # the caller counts this last line
                _account(carry, len(carry), stats)
                yield carry, len(carry)
            return
        stats.bytes += len(data)
        buf = carry + data if carry else data
        carry = b""
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > max_line:
                if not in_long:
                    stats.long_lines += 1
                    in_long = True
                _account(buf, len(buf), stats)
                yield buf, len(buf)
            else:
                carry = buf
            continue
        in_long = False
        end = cut + 1
        rest = len(buf) - end
        if rest:
            if seekable and rest <= len(data):
                try:
                    fp.seek(-rest, 1)
                    stats.bytes -= rest
                except OSError:
                    seekable = False
                    carry = buf[end:]
            else:
                carry = buf[end:]
        _account(buf, end, stats)
        yield buf, end


def _seekable(fp) -> bool:
    try:
        return bool(fp.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _account(block: bytes, end: int, stats: ReadStats) -> None:
    if block.find(b"\0", 0, end) >= 0:  # memchr: the common case costs next to nothing
        stats.nul_bytes += block.count(b"\0", 0, end)
    if not block.isascii():  # the whole block, past `end` too: if that is ASCII, so is the part used
        try:
            str(memoryview(block)[:end], "utf-8")
        except UnicodeDecodeError:
            stats.invalid_utf8_blocks += 1


def line_bounds(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """Start and end of the record holding byte `pos` within `buf[:end]`; newlines and NUL bytes both end a
    record. Only the line around `pos` is searched for NUL bytes."""
    if end is None:
        end = len(buf)
    start = buf.rfind(b"\n", 0, pos) + 1
    stop = buf.find(b"\n", pos, end)
    if stop < 0:
        stop = end
    z = buf.rfind(b"\0", start, pos)
    if z >= 0:
        start = z + 1
    z = buf.find(b"\0", pos, stop)
    if z >= 0:
        stop = z
    if stop > start and buf[stop - 1] == 13:  # \r
        stop -= 1
    return start, stop


def decode(raw: bytes) -> str:
    """Bytes of one record to text: invalid UTF-8 replaced, control characters other than tab removed."""
    if len(raw) > MAX_RECORD_CHARS:
        raw = raw[:MAX_RECORD_CHARS]
    text = raw.decode("utf-8", errors="replace")
    if not text.isprintable():
        text = "".join(c if (c.isprintable() or c == "\t") else " " for c in text)
    return text


class Tapped:
    """A binary stream that hands what it passes on to `tap(block, base)` in pieces that end at a line end
    (`base`: the newlines before the piece; the last piece may lack one, a line longer than MAX_LINE comes in
    pieces), so a second reader of the same bytes (what the node agent keeps for replay) numbers the lines as
    the parser does, in the same pass over the data. Not seekable: read_blocks carries partial lines over."""

    def __init__(self, fp, tap) -> None:
        self._fp, self._tap = fp, tap
        self._rest = b""
        self._lines = 0

    def read(self, n: int = -1) -> bytes:
        data = self._fp.read(n)
        if not data:
            if self._rest:
                self._emit(self._rest)
                self._rest = b""
            return data
        buf = self._rest + data if self._rest else data
        nl = buf.rfind(b"\n")
        if nl >= 0:
            self._emit(buf[:nl + 1])
            self._rest = buf[nl + 1:]
        elif len(buf) > MAX_LINE:
            self._emit(buf)
            self._rest = b""
        else:
            self._rest = buf
        return data

    def _emit(self, piece: bytes) -> None:
        self._tap(piece, self._lines)
        self._lines += piece.count(b"\n")
