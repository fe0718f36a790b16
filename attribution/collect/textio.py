"""Reading log files without trusting them: bounded memory, any bytes, overlong lines, missing final newline.

A file is read in blocks that end on a line boundary. A line longer than `max_line` bytes is handed over in
pieces so memory stays bounded; NUL bytes (left behind by a crash or a pre-allocated log) separate records.
Only the lines someone asked about are ever decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

from attribution.safefile import open_regular  # noqa: F401  (the readers open files through it)


BLOCK_SIZE = 8 << 20
MAX_LINE = 1 << 20
#: Part of a line that is decoded and handed to the rules; real log lines are far shorter.
MAX_RECORD_CHARS = 64 << 10


@dataclass
class ReadStats:
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
                max_line: int = MAX_LINE) -> Iterator[bytes]:
    """Yield blocks that end with a newline (except an overlong piece or the file's last line)."""
    carry = b""
    in_long = False
    while True:
        data = fp.read(block_size)
        if not data:
            if carry:
                stats.no_final_newline = True
                stats.lines += 1
                _account(carry, stats)
                yield carry
            return
        stats.bytes += len(data)
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            if len(buf) > max_line:
                if not in_long:
                    stats.long_lines += 1
                    in_long = True
                _account(buf, stats)
                yield buf
                carry = b""
            else:
                carry = buf
            continue
        in_long = False
        block = buf[: cut + 1]
        carry = buf[cut + 1:]
        stats.lines += block.count(b"\n")
        _account(block, stats)
        yield block


def _account(block: bytes, stats: ReadStats) -> None:
    if b"\0" in block:  # memchr: the common case costs next to nothing
        stats.nul_bytes += block.count(b"\0")
    if not block.isascii():
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            stats.invalid_utf8_blocks += 1


def line_bounds(buf: bytes, pos: int) -> tuple[int, int]:
    """Start and end of the record holding byte `pos`; newlines and NUL bytes both end a record."""
    start = max(buf.rfind(b"\n", 0, pos), buf.rfind(b"\0", 0, pos)) + 1
    end_n = buf.find(b"\n", pos)
    end_z = buf.find(b"\0", pos)
    ends = [e for e in (end_n, end_z) if e >= 0]
    end = min(ends) if ends else len(buf)
    if end > start and buf[end - 1:end] == b"\r":
        end -= 1
    return start, end


def decode(raw: bytes) -> str:
    """Bytes of one record to text: invalid UTF-8 replaced, control characters other than tab removed."""
    if len(raw) > MAX_RECORD_CHARS:
        raw = raw[:MAX_RECORD_CHARS]
    text = raw.decode("utf-8", errors="replace")
    if not text.isprintable():
        text = "".join(c if (c.isprintable() or c == "\t") else " " for c in text)
    return text
