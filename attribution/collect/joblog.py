"""A job's own stdout/stderr: taking apart the prefixes launchers and libraries put in front of each line.

Prefixes, outermost first: kubectl `--prefix` / `--timestamps`, pdsh's `host: ` (DeepSpeed's multi-node runner,
detected per file), srun `--label` (` 12: `), Open MPI's `[1,3]<stderr>:`, Ray's `(Name pid=N, ip=X)`,
torchrun's `--tee` role (`[default0]:`) and PyTorch's `[rankN]:` in either order,
then inside the message NCCL's `host:pid:tid [dev]` (optionally behind `[YYYY-MM-DD HH:MM:SS]`), glog stamps
(`[E310 09:24:36.943 file:line]`, `E0324 14:05:14.452000 pid file:line]`) and Python logging stamps.
Python tracebacks are followed per output stream so that the exception line after the frames is flagged.
"""

from __future__ import annotations

import re
from datetime import datetime, tzinfo

from attribution.frozen import Value
from attribution.timeparse import UTC, TimeError, YearGuesser, as_utc, parse_iso

_KUBECTL_PREFIX = re.compile(r"^\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\] ")
_KUBECTL_TS = re.compile(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")
# task ids and ranks are at most 9 digits: a "rank" beyond any real job is text, not a rank (and fits an int4)
_LABEL = re.compile(r"^\s*(?:P(?P<het>\d{1,9}) )?(?P<task>\d{1,9}): ")
_RANK = re.compile(r"^\[[Rr]ank ?(?P<rank>\d{1,9})\]: ?")
# torchrun --tee / --redirects (`[default0]:`), torchx roles (`[trainer3]:`, `[trainer0|0]:`): a role name and a
# local index, not a global rank
_ROLE = re.compile(r"^\[(?![Rr]ank ?\d)[A-Za-z_][A-Za-z_-]{0,40}\d{1,9}(?:\|\d{1,9})?\]: ?")
# Ray's worker prefix: `(RayWorkerWrapper pid=4009) `, `(TorchTrainer pid=123, ip=10.0.0.5) `
_RAY = re.compile(r"^(?:\[\d{1,3}(?:;\d{1,3})*m){0,4}\((?:[A-Za-z_][\w.:-]{0,80} )?pid=\d{1,9}"
                  r"(?:, ip=(?P<ip>[0-9a-fA-F.:]{3,45}))?\)(?:\[\d{1,3}(?:;\d{1,3})*m){0,4} ")
# terminal colour codes (Ray, rich, colorlog): ESC sequences anywhere; pasted logs often keep them without the ESC
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,20}[ -/]{0,4}[@-~]")
_COLOR_LITERAL = re.compile(r"^(?:\[\d{1,3}(?:;\d{1,3})*m)+")
# Open MPI's --tag-output / horovodrun: `[1,3]<stderr>:` (job id, rank)
_MPI_TAG = re.compile(r"^\[\d{1,9},(?P<rank>\d{1,9})\]<(?:stdout|stderr)>: ?")
# pdsh / the DeepSpeed and torchrun multi-node runners: `worker-1: `, `10.140.82.188: ` (detected per file)
_HOST_PREFIX = re.compile(r"^(?P<host>(?:\d{1,3}\.){3}\d{1,3}|[A-Za-z][\w-]{0,62}\d[\w.-]{0,190}): (?=\S)")
_RANK_IN_MESSAGE = re.compile(r"\[(?:PG [^\[\]]*?)?Rank (?P<rank>\d{1,9})\]")  # no "[" inside: linear time
_NCCL = re.compile(
    r"^(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] )?(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) "
    r"\[(?P<dev>\d+)\] ")
_GLOG_BRACKET = re.compile(
    r"^\[(?P<lvl>[EWIF])(?P<mo>\d{1,2})(?P<dd>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d+))? ")
_GLOG_PLAIN = re.compile(
    r"^(?P<lvl>[EWIF])(?P<mo>\d{1,2})(?P<dd>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d+))? +\d+ ")
_PYLOG = re.compile(
    r"^(?:\[[^\]\s]{1,40}\] )?\[?(?P<date>\d{4}-\d\d-\d\d)[ T](?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?")
_TRACEBACK = re.compile(r"^(?:Original )?Traceback \(most recent call last\):")

#: Structural pattern the job collector adds to the rules' prefilter, so traceback headers are seen.
TRACEBACK_PREFILTER = rb"Traceback \(most recent call last\)"

TRACEBACK_EXCEPTION = "traceback_exception"


class JobLine(Value):
    """One job output line with its prefixes (time, host, rank, srun label, pod) taken apart."""

    text: str
    time: datetime | None
    host: str | None = None
    rank: int | None = None
    label: int | None = None
    pod: str | None = None
    traceback_header: bool = False

    def __init__(self, text: str, time: datetime | None, host: str | None = None, rank: int | None = None,
                 label: int | None = None, pod: str | None = None, traceback_header: bool = False) -> None:
        # one per flagged line: written out (attribution.frozen; tests/test_frozen.py checks it against the fields)
        put = object.__setattr__
        put(self, "text", text)
        put(self, "time", time)
        put(self, "host", host)
        put(self, "rank", rank)
        put(self, "label", label)
        put(self, "pod", pod)
        put(self, "traceback_header", traceback_header)


class JobLineParser:
    """Takes one job-output line apart. `labelled` says whether the file carries srun --label prefixes."""

    def __init__(self, zone: tzinfo = UTC, years: YearGuesser | None = None, labelled: bool = False,
                 host_prefixes: frozenset[str] = frozenset()) -> None:
        self.zone = zone
        self.years = years or YearGuesser(None, None, zone)
        self.labelled = labelled
        self.host_prefixes = host_prefixes  # the job's node names when the file is pdsh-style (`node: line`)

    def parse(self, line: str) -> JobLine:
        text = _ANSI.sub("", line) if "\x1b" in line else line
        time: datetime | None = None
        pod = None
        label = None
        rank = None
        for _ in range(2):  # kubectl writes --prefix then --timestamps; accept either order
            m = _KUBECTL_PREFIX.match(text)
            if m:
                pod = m["pod"]
                text = text[m.end():]
            m = _KUBECTL_TS.match(text)
            if m:
                time = self._iso(m["iso"])
                text = text[m.end():]
        prefix_host = None
        if self.host_prefixes:
            m = _HOST_PREFIX.match(text)
            if m and _is_known_host(m["host"], self.host_prefixes):
                prefix_host = m["host"]
                text = text[m.end():]
        if self.labelled:
            m = _LABEL.match(text)
            if m:
                label = int(m["task"])
                text = text[m.end():]
        m = _MPI_TAG.match(text)
        if m:
            rank = int(m["rank"])
            text = text[m.end():]
        ray_ip = None
        m = _RAY.match(text)
        if m:
            ray_ip = m["ip"]
            text = text[m.end():]
        m = _COLOR_LITERAL.match(text)
        if m:
            text = text[m.end():]
        for _ in range(3):  # `[default0]:[rank12]:` and the like, in either order
            m = _RANK.match(text)
            if m and (rank is None or rank == int(m["rank"])):
                rank = int(m["rank"])
                text = text[m.end():]
                continue
            m = _ROLE.match(text)
            if m:
                text = text[m.end():]
                continue
            break
        if rank is None:
            m = _RANK_IN_MESSAGE.search(text)
            if m:
                rank = int(m["rank"])
        host = ray_ip or prefix_host
        m = _NCCL.match(text)
        if m:
            host = m["host"]
            if m["ts"] and time is None:
                time = self._iso(m["ts"])
        elif time is None:
            time = self._stamp(text)
        header = bool(_TRACEBACK.match(text))
        return JobLine(text=text.rstrip(), time=time, host=host, rank=rank, label=label, pod=pod,
                       traceback_header=header)

    def _stamp(self, text: str) -> datetime | None:
        m = _GLOG_BRACKET.match(text) or _GLOG_PLAIN.match(text)
        if m:
            micro = int((m["frac"] or "0")[:6].ljust(6, "0"))
            try:
                return self.years.place(int(m["mo"]), int(m["dd"]), int(m["h"]), int(m["m"]), int(m["s"]), micro)
            except (ValueError, OverflowError):
                return None
        m = _PYLOG.match(text)
        if m:
            frac = (m["frac"] or "0")[:6].ljust(6, "0")
            try:
                return as_utc(datetime.fromisoformat(f"{m['date']}T{m['time']}.{frac}"), self.zone)
            except ValueError:
                return None
        return None

    def _iso(self, s: str) -> datetime | None:
        try:
            return parse_iso(s, self.zone)
        except TimeError:
            return None


def _is_known_host(host: str, known: frozenset[str]) -> bool:
    h = host.lower()
    return h in known or h.split(".", 1)[0] in known


def host_prefixes(sample_lines: list[str], nodes) -> frozenset[str]:
    """The job's node names, when a file is pdsh-style output (`node: line`, DeepSpeed's multi-node runner): most
    of its non-empty lines start with one of the job's nodes and `: `. Otherwise empty (nothing is taken off:
    `mlx5: gpu5: got completion ...` is not a host prefix)."""
    known = frozenset(n.lower() for n in nodes)
    lines = [ln for ln in sample_lines if ln.strip()]
    if not lines or not known:
        return frozenset()
    hits = 0
    for ln in lines:
        m = _HOST_PREFIX.match(ln)
        if m and not _NCCL.match(ln) and _is_known_host(m["host"], known):
            hits += 1
    return known if hits * 2 >= len(lines) else frozenset()


def looks_labelled(sample_lines: list[str]) -> bool:
    """A file is srun --label output when most of its non-empty lines carry a task-number prefix."""
    lines = [ln for ln in sample_lines if ln.strip()]
    if not lines:
        return False
    hits = sum(1 for ln in lines if _LABEL.match(ln))
    return hits * 2 >= len(lines)


_EXCEPTION_HEAD = re.compile(r"^[A-Za-z_][\w.]*(?::|$)")


def is_exception_line(text: str) -> bool:
    """After a traceback's frames, the first line that is not indented and starts like `Name:` or `Name` ends it
    (the exception line). An unindented piece of a frame wrapped at the terminal width
    (`distributed_c10d.py", line 576, in ...`) does not."""
    return bool(text) and not text[0].isspace() and not _TRACEBACK.match(text) and bool(_EXCEPTION_HEAD.match(text))


class TracebackTracker:
    """Follows Python tracebacks per output stream and flags each traceback's exception line."""

    def __init__(self) -> None:
        self._open: set[tuple] = set()

    def feed(self, stream: tuple, line: JobLine) -> bool:
        """Returns True when `line` is the exception line of an open traceback in `stream`."""
        if line.traceback_header:
            self._open.add(stream)
            return False
        if stream in self._open and is_exception_line(line.text):
            self._open.discard(stream)
            return True
        return False
