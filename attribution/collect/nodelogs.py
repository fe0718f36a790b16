"""Node-local logs (kernel, Fabric Manager, other text logs) to observations, with multi-line records joined.

`parse_node_log` is the pure part: bytes in, observations and read statistics out. `read_node_log` opens the
file and turns I/O failures into a coverage record; a collector never raises for a bad file.
"""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from attribution.frozen import Value
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.timeparse import UTC, YearGuesser, resolve_zone
from attribution.collect.fabricmanager import FabricManagerLineParser
from attribution.collect.kernel import KernelLineParser
from attribution.collect.scan import Hit, Prefilter, next_line, previous_line, scan
from attribution.collect.textio import ReadStats, decode, open_regular

MAX_CONTINUATION = 16  # lines joined into one record at most
#: syslog-style prefixes that carry a tag: only the tag `kernel` is the kernel (docs/bundle.md "Trust")
TAGGED_FORMATS = ("syslog", "rfc3339")


def not_the_kernel(spec_source: str, head) -> bool:
    """A line in a kernel log written by another program (`logger`, any daemon): anyone on the node can write
    `mallory[4242]: NVRM: Xid ...` to syslog, and it is not a kernel message."""
    return (spec_source == "kernel" and getattr(head, "fmt", None) in TAGGED_FORMATS
            and getattr(head, "tag", None) != "kernel")


class NodeLogSpec(Value):
    """Which node log is read, whose it is, and the location its events name."""

    source: str  # kernel | fabricmanager | node
    node: str
    location: str  # path shown in locations, relative to the bundle (or the absolute path on a node)


def _parsers(ctx: ExecutionContext, spec: NodeLogSpec):
    zone = resolve_zone(ctx.timezone)
    years = YearGuesser(ctx.start, ctx.end, zone)
    if spec.source == "fabricmanager":
        return FabricManagerLineParser(zone=zone, years=years)
    return KernelLineParser(zone=zone, boot_time=ctx.boot_time.get(spec.node), years=years)


def parse_node_log(fp: BinaryIO, spec: NodeLogSpec, ctx: ExecutionContext,
                   prefilter: Prefilter) -> tuple[list[Observation], ReadStats]:
    """Observations for every record of a node log that the prefilter points at. Pure apart from `fp`."""
    stats = ReadStats()
    return list(iter_node_log(fp, spec, ctx, prefilter, stats)), stats


def iter_node_log(fp: BinaryIO, spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
                  stats: ReadStats) -> Iterator[Observation]:
    """parse_node_log one observation at a time; `stats` is complete once the iterator is."""
    parser = _parsers(ctx, spec)
    seen_heads: set[int] = set()
    last_time: datetime | None = None
    backwards = 0
    foreign = 0
    raw_dmesg_untimed = False
    current: bytes | None = None
    for hit in scan(fp, stats, prefilter):
        if hit.block is not current:
            current = hit.block
            seen_heads.clear()
        rec = _assemble(hit, parser)
        if rec.head_start in seen_heads:
            continue
        seen_heads.add(rec.head_start)
        first = rec.head
        if not_the_kernel(spec.source, first):
            foreign += 1
            continue
        if getattr(first, "fmt", None) in ("dmesg", "kmsg") and first.time is None:
            raw_dmesg_untimed = True
        t = first.time
        if t is not None:
            if last_time is not None and t < last_time - timedelta(seconds=1):
                backwards += 1
            last_time = t if last_time is None or t > last_time else last_time
        yield Observation(
            source=spec.source,
            node=spec.node,
            location=f"{spec.location}:{hit.lineno - rec.lines_before}",
            text=rec.text,
            line=rec.line,
            time=t,
            host=getattr(first, "host", None),
        )
    if raw_dmesg_untimed:
        stats.notes.append("seconds-since-boot stamps but no boot_time for this node: times unknown")
    if foreign:
        stats.notes.append(f"{foreign} line(s) with a syslog tag other than kernel ignored (not kernel messages)")
    if backwards:
        stats.notes.append(f"timestamps go backwards {backwards} time(s)")


class _Record(Value):
    """A flagged record being read: its first line, parsed, and the record's text so far."""

    head_start: int
    line: str  # the record's first line, as in the file
    head: object  # the parsed first line (KernelLine or FMLine)
    text: str
    lines_before: int  # how many lines before the hit the record starts


def _assemble(hit: Hit, parser) -> _Record:
    """Join a record's continuation lines (indented dmesg lines, FM payload lines, kmsg 'c' records)."""
    block = hit.block
    s, e = hit.start, hit.end
    raw = decode(block[s:e])
    cur = parser.parse(raw)
    before = 0
    # Walk back from a continuation line to the line that starts the record.
    while cur.continuation and before < MAX_CONTINUATION:
        prev = previous_line(block, s)
        if prev is None:
            break
        s, e = prev
        before += 1
        raw = decode(block[s:e])
        cur = parser.parse(raw)
    head_start, head_end, head = s, e, cur
    parts = [cur.text]
    # Walk forward collecting continuation lines.
    pos_end = head_end
    for _ in range(MAX_CONTINUATION):
        nxt = next_line(block, pos_end, hit.stop)
        if nxt is None:
            break
        ns, ne = nxt
        p = parser.parse(decode(block[ns:ne]))
        if not p.continuation:
            break
        parts.append(p.text)
        pos_end = ne
    text = " ".join(x for x in parts if x)
    return _Record(head_start, raw, head, text, before)


def read_node_log(path: Path, spec: NodeLogSpec, ctx: ExecutionContext,
                  prefilter: Prefilter) -> tuple[list[Observation], Coverage]:
    """Read one node log; every failure becomes a coverage record instead of an exception."""
    got: list[Coverage] = []
    obs = list(stream_node_log(path, spec, ctx, prefilter, got.append))
    return ([] if got[0].status == "error" else obs), got[0]  # a file that failed mid-way gives nothing


def stream_node_log(path: Path, spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
                    done: Callable[[Coverage], None]) -> Iterator[Observation]:
    """read_node_log one observation at a time; its coverage record goes to `done` at the end. An error while
    reading ends the file with an error record (read_node_log then drops what it had)."""
    stats = ReadStats()
    try:
        with open_regular(path) as fp:
            yield from iter_node_log(fp, spec, ctx, prefilter, stats)
    except FileNotFoundError:
        done(Coverage(spec.source, spec.node, "missing", reason="no file", file=spec.location))
        return
    except OSError as exc:
        done(Coverage(spec.source, spec.node, "error", reason=f"cannot read: {exc.strerror or exc}",
                      file=spec.location))
        return
    status = "ok" if stats.bytes else "empty"
    done(Coverage(spec.source, spec.node, status, lines=stats.lines, file=spec.location,
                  notes=tuple(stats.summary())))


def iter_node_blocks(blocks, spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
                     notes: list[str]) -> Iterator[Observation]:
    """The observations of a log a node sent as blocks of consecutive lines ([(number of the first line, lines)]:
    intake/codec.py LogPiece), each block read as iter_node_log reads a file, its lines numbered as they were in the
    log; what the reading noticed goes to `notes`, each once. Pure."""
    for first, lines in blocks:
        stats = ReadStats(lines=first - 1)
        data = "\n".join(lines).encode("utf-8", errors="surrogateescape") + b"\n"
        yield from iter_node_log(io.BytesIO(data), spec, ctx, prefilter, stats)
        notes.extend(n for n in stats.summary() if n not in notes)


def parse_node_text(text: str, spec: NodeLogSpec, ctx: ExecutionContext,
                    prefilter: Prefilter) -> list[Observation]:
    """Convenience for tests and connectors that already hold the text."""
    obs, _ = parse_node_log(io.BytesIO(text.encode("utf-8", errors="surrogateescape")), spec, ctx, prefilter)
    return obs


__all__ = ["NodeLogSpec", "parse_node_log", "iter_node_log", "iter_node_blocks", "read_node_log", "stream_node_log",
           "parse_node_text", "UTC"]
