"""Collectors on a live node, for the epilog: the kernel log from journald, /dev/kmsg or a syslog file, and the
Fabric Manager log. Each returns observations and one coverage record, never an exception."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
from attribution.collect.scan import Prefilter
from attribution.collect.textio import open_regular

UTC = timezone.utc


@dataclass(frozen=True)
class LiveSources:
    kernel: str = "auto"  # auto | journald | dmesg | file
    kernel_file: str | None = None
    fabricmanager_log: str | None = "/var/log/fabricmanager.log"
    timeout: float = 10.0


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
    return shutil.which("journalctl") is not None and (Path("/run/systemd/journal").is_dir()
                                                       or Path("/var/log/journal").is_dir())


def read_file(path: Path, spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
              offset: int = 0) -> tuple[list[Observation], Coverage]:
    """A log file read from `offset` (where the prolog found it at job start; 0 when unknown or rotated)."""
    try:
        with open_regular(path) as fp:
            size = os.fstat(fp.fileno()).st_size
            if 0 < offset <= size:
                fp.seek(offset)
            obs, stats = parse_node_log(fp, spec, ctx, prefilter)
    except FileNotFoundError:
        return [], Coverage(spec.source, spec.node, "missing", reason="no file", file=str(path))
    except OSError as exc:
        return [], Coverage(spec.source, spec.node, "error", reason=f"cannot read: {exc.strerror or exc}",
                            file=str(path))
    notes = list(stats.summary())
    if offset and offset <= size:
        notes.append(f"read from byte {offset} (job start)")
    return obs, Coverage(spec.source, spec.node, "ok" if stats.bytes else "empty", lines=stats.lines,
                         file=str(path), notes=tuple(notes))


def read_journal(spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter, since: datetime, until: datetime,
                 timeout: float) -> tuple[list[Observation], Coverage]:
    """The kernel's journal between `since` and `until` (the job window with the causal graph's margins), through
    the kernel transport only (`-k` is _TRANSPORT=kernel of this boot, said again as a match): what `logger`
    writes is not read."""
    cmd = ["journalctl", "-k", "_TRANSPORT=kernel", "--no-pager", "-q", "-o", "short-iso-precise",
           f"--since=@{int(since.timestamp())}", f"--until=@{int(until.timestamp()) + 1}"]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], Coverage(spec.source, spec.node, "error", reason=f"journalctl: {exc}", file="journald")
    if r.returncode != 0 and not r.stdout:
        err = r.stderr.decode(errors="replace").strip().splitlines()
        return [], Coverage(spec.source, spec.node, "error", reason=f"journalctl: {err[0] if err else r.returncode}",
                            file="journald")
    obs, stats = parse_node_log(io.BytesIO(r.stdout), spec, ctx, prefilter)
    return obs, Coverage(spec.source, spec.node, "ok" if stats.bytes else "empty", lines=stats.lines,
                         file="journald", notes=tuple(stats.summary()))


def read_kmsg(spec: NodeLogSpec, ctx: ExecutionContext, prefilter: Prefilter,
              device: str = "/dev/kmsg") -> tuple[list[Observation], Coverage]:
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
    obs, stats = parse_node_log(io.BytesIO(b"".join(chunks)), spec, ctx, prefilter)
    return obs, Coverage(spec.source, spec.node, "ok" if stats.bytes else "empty", lines=stats.lines, file=device,
                         notes=tuple(stats.summary()))


def collect_node(sources: LiveSources, node: str, ctx: ExecutionContext, prefilter_for,
                 start: datetime, end: datetime, offsets: dict[str, int] | None = None, *,
                 margins: tuple[timedelta, timedelta]) -> tuple[list[Observation], list[Coverage]]:
    """This node's kernel and Fabric Manager observations for the job window; `margins` (before the start,
    after the end) are the causal graph's (CausalGraph.margins), so collection reads what correlation weighs."""
    offsets = offsets or {}
    obs: list[Observation] = []
    cov: list[Coverage] = []
    kspec = lambda loc: NodeLogSpec("kernel", node, loc)  # noqa: E731
    kind = sources.kernel
    if kind == "auto":
        kind = "file" if sources.kernel_file else ("journald" if _journal_available() else "dmesg")
    if kind == "file" and sources.kernel_file:
        o, c = read_file(Path(sources.kernel_file), kspec(sources.kernel_file), ctx, prefilter_for("kernel"),
                         offsets.get("kernel", 0))
    elif kind == "journald":
        o, c = read_journal(kspec("journald"), ctx, prefilter_for("kernel"), start - margins[0], end + margins[1],
                            sources.timeout)
    else:
        o, c = read_kmsg(kspec("/dev/kmsg"), ctx, prefilter_for("kernel"))
    obs += o
    cov.append(c)
    if sources.fabricmanager_log:
        p = Path(sources.fabricmanager_log)
        o, c = read_file(p, NodeLogSpec("fabricmanager", node, str(p)), ctx, prefilter_for("fabricmanager"),
                         offsets.get("fabricmanager", 0))
        obs += o
        cov.append(c)
    return obs, cov
