"""The job's stdout/stderr files to observations (prefixes taken apart, traceback exception lines flagged)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import re2

from attribution.model import Coverage, ExecutionContext, Observation
from attribution.timeparse import YearGuesser, resolve_zone
from attribution.collect.joblog import (TRACEBACK_EXCEPTION, TRACEBACK_PREFILTER, JobLineParser, TracebackTracker,
                                        host_prefixes, looks_labelled)
from attribution.collect.scan import Prefilter, scan
from attribution.collect.textio import ReadStats, Tapped, decode, open_regular

SAMPLE_BYTES = 64 << 10


class _Rewound:
    """A reader that first replays bytes already taken from the head of a stream (pipes cannot seek)."""

    def __init__(self, head: bytes, fp: BinaryIO) -> None:
        self._head = head
        self._fp = fp

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0 or n >= len(self._head):
                out, self._head = self._head, b""
                rest = self._fp.read(-1 if n < 0 else n - len(out))
                return out + rest
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._fp.read(n)


class _WithTraceback:
    """The rules' prefilter plus the structural traceback header pattern, for a prefilter that cannot take it in
    (the rule pack's can: `Prefilter.extended`, one pass for both)."""

    def __init__(self, inner: Prefilter) -> None:
        self._inner = inner
        self._tb = re2.compile(TRACEBACK_PREFILTER)

    def find(self, block: bytes, end: int | None = None) -> list[int]:
        end = len(block) if end is None else end
        a = self._inner.find(block, end)
        b = [m.start() for m in self._tb.finditer(block, 0, end)]
        if not b:
            return a
        return sorted(set(a).union(b))


def with_traceback(prefilter: Prefilter) -> Prefilter:
    """The job output's prefilter: the rules' patterns and the traceback header."""
    extended = getattr(prefilter, "extended", None)
    if extended is not None:
        return extended((TRACEBACK_PREFILTER.decode(),))
    return _WithTraceback(prefilter)


def _rewound(head: bytes, fp: BinaryIO) -> BinaryIO:
    """The stream from its start again: seeked back when it can be (so it is read without copies)."""
    try:
        if fp.seekable():
            fp.seek(-len(head), io.SEEK_CUR)
            return fp
    except (AttributeError, OSError, ValueError):
        pass
    return _Rewound(head, fp)


def node_of_file(name: str, nodes: tuple[str, ...]) -> str | None:
    """`g101.out`, `g101-stderr.log`, `g101_rank0.txt` or `g101` belong to node g101 (docs/bundle.md rule 4)."""
    for n in sorted(nodes, key=len, reverse=True):
        if name == n or (name.startswith(n) and name[len(n):len(n) + 1] in (".", "-", "_")):
            return n
    return None


def parse_job_output(fp: BinaryIO, location: str, ctx: ExecutionContext, prefilter: Prefilter,
                     file_node: str | None = None) -> tuple[list[Observation], ReadStats]:
    stats = ReadStats()
    return list(iter_job_output(fp, location, ctx, prefilter, stats, file_node)), stats


def iter_job_output(fp: BinaryIO, location: str, ctx: ExecutionContext, prefilter: Prefilter, stats: ReadStats,
                    file_node: str | None = None) -> Iterator[Observation]:
    """parse_job_output one observation at a time; `stats` is complete once the iterator is."""
    head = fp.read(SAMPLE_BYTES)
    sample = head.decode("utf-8", errors="replace").splitlines()[:400]
    zone = resolve_zone(ctx.timezone)
    parser = JobLineParser(zone=zone, years=YearGuesser(ctx.start, ctx.end, zone),
                           labelled=looks_labelled(sample), host_prefixes=host_prefixes(sample, ctx.nodes))
    tracker = TracebackTracker()
    for hit in scan(_rewound(head, fp), stats, with_traceback(prefilter)):
        raw = decode(hit.raw)
        jl = parser.parse(raw)
        is_exc = tracker.feed((jl.label, jl.rank, jl.pod, jl.host), jl)
        if jl.traceback_header:
            continue
        yield Observation(
            source="job",
            node=file_node,
            location=f"{location}:{hit.lineno}",
            text=jl.text,
            line=raw,
            time=jl.time,
            host=jl.host,
            rank=jl.rank,
            label=jl.label,
            flags=_EXCEPTION if is_exc else _NO_FLAGS,
        )


_EXCEPTION = frozenset((TRACEBACK_EXCEPTION,))
_NO_FLAGS: frozenset[str] = frozenset()


def read_job_output(path: Path, location: str, ctx: ExecutionContext, prefilter: Prefilter,
                    tail_bytes: int | None = None, tap=None) -> tuple[list[Observation], Coverage]:
    """One job output file. Only a regular file is read (safefile.open_regular); with `tail_bytes`, at most its
    last `tail_bytes` bytes from the first line that starts in them (the job's owner decides how big the file
    is: a sparse terabyte would outlast any hook's budget), line numbers then counting from there. `tap`: sees
    what is read (textio.Tapped), as the parser numbers it."""
    got: list[Coverage] = []
    obs = list(stream_job_output(path, location, ctx, prefilter, got.append, tail_bytes, tap))
    return ([] if got[0].status == "error" else obs), got[0]  # a file that failed mid-way gives nothing


def stream_job_output(path: Path, location: str, ctx: ExecutionContext, prefilter: Prefilter,
                      done: Callable[[Coverage], None], tail_bytes: int | None = None,
                      tap=None) -> Iterator[Observation]:
    """read_job_output one observation at a time; its coverage record goes to `done` at the end."""
    file_node = node_of_file(path.name, ctx.nodes)
    notes: list[str] = []
    stats = ReadStats()
    try:
        with open_regular(path) as fp:
            size = os.fstat(fp.fileno()).st_size
            if tail_bytes is not None and size > tail_bytes:
                fp.seek(size - tail_bytes - 1)
                fp.readline()  # the rest of the line the cut falls in (bounded: at most tail_bytes + 1 bytes)
                notes.append(f"read the last {size - fp.tell()} of {size} bytes (line numbers count from there)")
            yield from iter_job_output(Tapped(fp, tap) if tap else fp, location, ctx, prefilter, stats, file_node)
    except FileNotFoundError:
        done(Coverage("job", file_node, "missing", reason="no file", file=location))
        return
    except OSError as exc:
        done(Coverage("job", file_node, "error", reason=f"cannot read: {exc.strerror or exc}", file=location))
        return
    status = "ok" if stats.bytes else "empty"
    done(Coverage("job", file_node, status, lines=stats.lines, file=location, notes=(*notes, *stats.summary())))


def parse_job_text(text: str, location: str, ctx: ExecutionContext, prefilter: Prefilter,
                   file_node: str | None = None) -> list[Observation]:
    obs, _ = parse_job_output(io.BytesIO(text.encode("utf-8", errors="surrogateescape")), location, ctx,
                              prefilter, file_node)
    return obs

