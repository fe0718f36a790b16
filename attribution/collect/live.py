"""Collectors on a live node, for the epilog: the kernel log from journald, /dev/kmsg or a syslog file, and the
Fabric Manager log. Each returns observations and one coverage record, never an exception.

subprocess, tempfile, selectors and shutil are imported where journalctl runs: a node whose kernel log is a file
(and every hook's import) does without them (~15 ms of imports on a 2-CPU EPYC)."""

from __future__ import annotations

import io
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from attribution.frozen import Value
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
from attribution.collect.scan import Prefilter
from attribution.collect.textio import Tapped, open_regular

UTC = timezone.utc


class LiveSources(Value):
    """Where a live node's logs are read from, and the bounds of reading them."""

    kernel: str = "auto"  # auto | journald | dmesg | file
    kernel_file: str | None = None
    fabricmanager_log: str | None = "/var/log/fabricmanager.log"
    timeout: float = 10.0
    max_bytes: int = 64 * 1024 * 1024  # of each log: from the job's start on, or the last this many when unknown


class _Capped:
    """A binary file read no further than `limit` bytes from where it stands (what the readers need: read(n))."""

    def __init__(self, fp, limit: int) -> None:
        self._fp, self.left = fp, limit

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self._fp.read(n)
        self.left -= len(data)
        return data


def boot_time() -> datetime | None:
    """When this node booted (btime in /proc/stat), to place /dev/kmsg's microseconds since boot in time."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return datetime.fromtimestamp(int(line.split()[1]), tz=UTC)
    except (OSError, ValueError):
        return None
    return None


def _journal_available() -> bool:
    import shutil

    return shutil.which("journalctl") is not None and (Path("/run/systemd/journal").is_dir()
                                                       or Path("/var/log/journal").is_dir())


def _tapped(fp, tap):
    return Tapped(fp, tap) if tap else fp


def read_file(path: Path, spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
              offset: int = 0, max_bytes: int = LiveSources.max_bytes,
              tap=None) -> tuple[list[Observation], Coverage]:
    """A log file read from `offset` (where the prolog found it at job start; 0 when unknown or rotated), at most
    `max_bytes` of it: from the offset on (the earliest fault is the one that explains the rest), or the file's
    last `max_bytes` when the offset is unknown (a syslog file holds weeks before this job)."""
    skipped = 0
    try:
        with open_regular(path) as fp:
            size = os.fstat(fp.fileno()).st_size
            if 0 < offset <= size:
                fp.seek(offset)
                start = offset
            else:
                start = max(0, size - max_bytes)
                skipped = start
                if start:
                    fp.seek(start)
            capped = _Capped(fp, max_bytes)
            obs, stats = parse_node_log(_tapped(capped, tap), spec, ctx, prefilter)
            cut = size - start > max_bytes and capped.left == 0
    except FileNotFoundError:
        return [], Coverage(spec.source, spec.node, "missing", reason="no file", file=str(path))
    except OSError as exc:
        return [], Coverage(spec.source, spec.node, "error", reason=f"cannot read: {exc.strerror or exc}",
                            file=str(path))
    notes = list(stats.summary())
    if offset and offset <= size:
        notes.append(f"read from byte {offset} (job start)")
    elif skipped:
        notes.append(f"no job-start offset: read the last {max_bytes} bytes (from byte {skipped})")
    if cut:
        notes.append(f"read only {max_bytes} bytes of {size - start} since the job started (epilog.node_log_bytes)")
    return obs, Coverage(spec.source, spec.node, "ok" if stats.bytes else "empty", lines=stats.lines,
                         file=str(path), notes=tuple(notes))


def read_journal(spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter, since: datetime, until: datetime,
                 timeout: float, max_bytes: int = LiveSources.max_bytes,
                 tap=None) -> tuple[list[Observation], Coverage]:
    """The kernel's journal between `since` and `until` (the job window with the causal graph's margins), through
    the kernel transport only (`-k` is _TRANSPORT=kernel of this boot, said again as a match): what `logger`
    writes is not read."""
    import subprocess

    cmd = ["journalctl", "-k", "_TRANSPORT=kernel", "--no-pager", "-q", "-o", "short-iso-precise",
           f"--since=@{int(since.timestamp())}", f"--until=@{int(until.timestamp()) + 1}"]
    try:
        out, err, rc, cut = _bounded_run(cmd, timeout, max_bytes)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], Coverage(spec.source, spec.node, "error", reason=f"journalctl: {exc}", file="journald")
    if rc != 0 and not out and not cut:
        lines = err.decode(errors="replace").strip().splitlines()
        return [], Coverage(spec.source, spec.node, "error", reason=f"journalctl: {lines[0] if lines else rc}",
                            file="journald")
    obs, stats = parse_node_log(_tapped(io.BytesIO(out), tap), spec, ctx, prefilter)
    notes = list(stats.summary())
    if cut:
        notes.append(f"read only the first {max_bytes} bytes of the window (epilog.node_log_bytes)")
    return obs, Coverage(spec.source, spec.node, "ok" if stats.bytes else "empty", lines=stats.lines,
                         file="journald", notes=tuple(notes))


def _bounded_run(cmd: list[str], timeout: float, max_bytes: int) -> tuple[bytes, bytes, int, bool]:
    """Run `cmd`, keeping at most `max_bytes` of its output (it is stopped there) and 64 KiB of its errors;
    (output, errors, exit status, whether the output was cut)."""
    import selectors
    import subprocess
    import tempfile

    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL)
        try:
            chunks, got, cut = [], 0, False
            end = time.monotonic() + timeout
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                while True:
                    left = end - time.monotonic()
                    if left <= 0:
                        raise subprocess.TimeoutExpired(cmd, timeout)
                    if not sel.select(left):
                        continue
                    data = os.read(proc.stdout.fileno(), 1 << 20)
                    if not data:
                        break
                    chunks.append(data[: max_bytes - got])
                    got += len(chunks[-1])
                    if got >= max_bytes:
                        cut = True
                        break
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
        errf.seek(0)
        return b"".join(chunks), errf.read(65536), proc.returncode, cut


def read_kmsg(spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
              device: str = "/dev/kmsg", tap=None) -> tuple[list[Observation], Coverage]:
    """The kernel ring buffer, record by record, without blocking (what `dmesg` reads)."""
    chunks = []
    try:
        fd = os.open(device, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return [], Coverage(spec.source, spec.node, "error", reason=f"cannot read {device}: {exc.strerror or exc}",
                            file=device)
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: records were overwritten while reading; continue with the next
                    continue
                break
            if not rec:
                break
            chunks.append(rec if rec.endswith(b"\n") else rec + b"\n")
    finally:
        os.close(fd)
    obs, stats = parse_node_log(_tapped(io.BytesIO(b"".join(chunks)), tap), spec, ctx, prefilter)
    return obs, Coverage(spec.source, spec.node, "ok" if stats.bytes else "empty", lines=stats.lines, file=device,
                         notes=tuple(stats.summary()))


def collect_node(sources: LiveSources, node: str, ctx: ExecutionContext, prefilter_for,
                 start: datetime, end: datetime, offsets: dict[str, int] | None = None, *,
                 margins: tuple[timedelta, timedelta],
                 tap_for=None) -> tuple[list[Observation], list[Coverage]]:
    """This node's kernel and Fabric Manager observations for the job window; `margins` (before the start,
    after the end) are the causal graph's (CausalGraph.margins), so collection reads what correlation weighs.
    `tap_for(source, location)`: a tap (textio.Tapped) that sees each log as it is read, or None."""
    offsets = offsets or {}
    tap = tap_for or (lambda source, location: None)
    obs: list[Observation] = []
    cov: list[Coverage] = []
    kspec = lambda loc: NodeLogSpec("kernel", node, loc)  # noqa: E731
    kind = sources.kernel
    if kind == "auto":
        kind = "file" if sources.kernel_file else ("journald" if _journal_available() else "dmesg")
    if kind == "file" and sources.kernel_file:
        o, c = read_file(Path(sources.kernel_file), kspec(sources.kernel_file), ctx, prefilter_for("kernel"),
                         offsets.get("kernel", 0), sources.max_bytes, tap("kernel", sources.kernel_file))
    elif kind == "journald":
        o, c = read_journal(kspec("journald"), ctx, prefilter_for("kernel"), start - margins[0], end + margins[1],
                            sources.timeout, sources.max_bytes, tap("kernel", "journald"))
    else:
        o, c = read_kmsg(kspec("/dev/kmsg"), ctx, prefilter_for("kernel"), tap=tap("kernel", "/dev/kmsg"))
    obs += o
    cov.append(c)
    if sources.fabricmanager_log:
        p = Path(sources.fabricmanager_log)
        o, c = read_file(p, NodeLogSpec("fabricmanager", node, str(p)), ctx, prefilter_for("fabricmanager"),
                         offsets.get("fabricmanager", 0), sources.max_bytes, tap("fabricmanager", str(p)))
        obs += o
        cov.append(c)
    return obs, cov
