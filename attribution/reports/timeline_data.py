"""What a job timeline shows, computed from a verdict document and the job's events. Pure.

The verdict document (docs/verdict.md) says which event is the root cause, which causes are left and which events
are symptoms of what; the job's events add the context events and the events seen outside the job window. Both
`attribution diagnose --html` (a Diagnosis) and `attribution report job` (the store) come here with the same two
things, so the two pages are the same page.

Symptoms are binned: one bin per row (node) and time slice, sized so the focus span has about `max_bins` slices
whatever the number of symptom lines (symptoms with no timestamp: one bin per row and kind).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping, Sequence

from attribution.model import Event
from attribution.timeparse import parse_iso

#: The row of events that belong to no node (a job-level line, a scheduler decision without a node).
JOB_ROW = "(job)"
#: Bin widths a person reads without arithmetic, in seconds.
NICE_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
#: Bins a chart may hold across all rows (a 64-node job gets coarser slices than a 4-node one), and the range of
#: slices across the focus span.
CELL_BUDGET, MIN_BINS, MAX_BINS = 2400, 24, 100
#: Source lines kept per symptom bin (the first of each kind, up to this many, and the last): enough to see what
#: the bin is, small on disk.
EXAMPLES_PER_BIN = 2


@dataclass(frozen=True)
class Mark:
    """One event as the timeline draws it."""

    kind: str
    role: str  # root_cause | cause | symptom | context | outside_window
    row: str
    time: datetime | None
    location: str
    line: str
    source: str = ""
    rule: str = ""
    code: int | None = None
    gpu: str | None = None
    rank: int | None = None
    explained_by: str | None = None


@dataclass(frozen=True)
class SymptomBin:
    """The symptoms on one row in one time slice, or, for those with no timestamp (`start` None), of one kind."""

    row: str
    start: datetime | None
    end: datetime | None
    kinds: tuple[tuple[str, int], ...]  # (kind, count), the most frequent first
    count: int
    of_root: int  # how many of them the root cause explains
    first: datetime | None
    last: datetime | None
    examples: tuple[tuple[str, str], ...]  # (location, line): the first line of each kind, and the last line

    @property
    def kind(self) -> str:
        """The most frequent kind: the colour of the bin."""
        return self.kinds[0][0]


@dataclass(frozen=True)
class SymptomGroup:
    """Symptoms of one kind (for the list under the chart), with a line per node."""

    kind: str
    of_root: bool
    count: int
    first: datetime | None
    last: datetime | None
    by_row: tuple[tuple[str, int, datetime | None, datetime | None, str, str], ...]  # row, n, first, last, loc, line
    explained_by: tuple[str, ...] = ()  # what explains them ("root_cause", another cause's reference); () for none


@dataclass(frozen=True)
class Timeline:
    job: Mapping
    outcome: str
    confidence: str
    action: str
    explanation: str
    culprits: tuple[tuple[str, str | None], ...]
    rows: tuple[str, ...]
    root: Mark | None
    causes: tuple[Mark, ...]
    bins: tuple[SymptomBin, ...]
    context: tuple[Mark, ...]
    outside: tuple[Mark, ...]
    groups: tuple[SymptomGroup, ...]
    coverage: tuple[Mapping, ...]
    domain: tuple[datetime, datetime]
    bin_seconds: int
    symptoms_total: int
    job_start: datetime | None
    job_end: datetime | None
    rules_version: str = ""
    first_consequence: Mapping[str, datetime] = field(default_factory=dict)  # row -> first timed root symptom

    @property
    def gaps(self) -> tuple[Mapping, ...]:
        return tuple(c for c in self.coverage if c.get("status") != "ok")


def _time(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return parse_iso(str(value))


def _key(d: Mapping) -> tuple:
    return (d.get("rule"), d.get("location"), d.get("kind"), d.get("line"))


def _mark(d: Mapping, role: str, rows: set[str]) -> Mark:
    row = d.get("node") or JOB_ROW
    rows.add(row)
    return Mark(kind=d["kind"], role=role, row=row, time=_time(d.get("time")), location=d.get("location") or "",
                line=d.get("line") or "", source=d.get("source") or "", rule=d.get("rule") or "",
                code=d.get("code"), gpu=d.get("gpu"), rank=d.get("rank"), explained_by=d.get("explained_by"))


def _event_mark(ev: Event, role: str, rows: set[str]) -> Mark:
    row = ev.node or JOB_ROW
    rows.add(row)
    return Mark(kind=ev.kind, role=role, row=row, time=ev.time, location=ev.location, line=ev.line,
                source=ev.source, rule=ev.rule, code=ev.code, gpu=ev.gpu, rank=ev.rank)


def nice_bin_seconds(span_seconds: float, max_bins: int) -> int:
    """The smallest readable bin width that cuts `span_seconds` into at most `max_bins` slices."""
    want = span_seconds / max(1, max_bins)
    for s in NICE_SECONDS:
        if s >= want:
            return s
    return NICE_SECONDS[-1]


def _focus(marks: Iterable[Mark], fallback: tuple[datetime | None, datetime | None]) -> tuple[datetime, datetime]:
    times = [m.time for m in marks if m.time is not None]
    if times:
        lo, hi = min(times), max(times)
    else:
        lo, hi = fallback
        lo = lo or hi
        hi = hi or lo
    if lo is None or hi is None:
        epoch = datetime.fromtimestamp(0, tz=timezone.utc)  # a job with no time at all: an empty axis
        return epoch, epoch + timedelta(minutes=2)
    pad = max((hi - lo).total_seconds() * 0.05, 30.0)
    return lo - timedelta(seconds=pad), hi + timedelta(seconds=pad)


def _bins(symptoms: Sequence[Mark], width: int) -> list[SymptomBin]:
    cells: dict[tuple, list[Mark]] = defaultdict(list)
    for m in symptoms:
        key = (m.row, None, m.kind) if m.time is None else (m.row, int(m.time.timestamp() // width), "")
        cells[key].append(m)
    out = []
    for (row, slot, _), ms in cells.items():
        ms.sort(key=lambda m: (m.time is None, m.time.timestamp() if m.time else 0, m.location))
        timed = [m.time for m in ms if m.time is not None]
        start = end = None
        if slot is not None:
            start = datetime.fromtimestamp(slot * width, tz=timezone.utc)
            end = start + timedelta(seconds=width)
        counts = Counter(m.kind for m in ms)
        firsts: dict[str, Mark] = {}
        for m in ms:
            firsts.setdefault(m.kind, m)
        picks = list(firsts.values())[:EXAMPLES_PER_BIN]
        if ms[-1] not in picks:
            picks.append(ms[-1])
        out.append(SymptomBin(row=row, start=start, end=end,
                              kinds=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                              count=len(ms), of_root=sum(1 for m in ms if m.explained_by == "root_cause"),
                              first=min(timed) if timed else None, last=max(timed) if timed else None,
                              examples=tuple((m.location, m.line) for m in picks)))
    out.sort(key=lambda b: (b.start is None, b.start.timestamp() if b.start else 0, b.row, b.kind))
    return out


def _groups(symptoms: Sequence[Mark]) -> list[SymptomGroup]:
    by: dict[tuple[str, bool], dict[str, list[Mark]]] = defaultdict(lambda: defaultdict(list))
    for m in symptoms:
        by[(m.kind, m.explained_by == "root_cause")][m.row].append(m)
    out = []
    for (kind, of_root), rows in by.items():
        lines = []
        for row, ms in rows.items():
            timed = sorted(m.time for m in ms if m.time is not None)
            first = min(ms, key=lambda m: (m.time is None, m.time.timestamp() if m.time else 0, m.location))
            lines.append((row, len(ms), timed[0] if timed else None, timed[-1] if timed else None,
                          first.location, first.line))
        lines.sort(key=lambda r: (r[2] is None, r[2].timestamp() if r[2] else 0, r[0]))
        firsts = [r[2] for r in lines if r[2] is not None]
        lasts = [r[3] for r in lines if r[3] is not None]
        refs = sorted({m.explained_by for ms in rows.values() for m in ms if m.explained_by})
        out.append(SymptomGroup(kind=kind, of_root=of_root, count=sum(r[1] for r in lines),
                                first=min(firsts) if firsts else None, last=max(lasts) if lasts else None,
                                by_row=tuple(lines), explained_by=tuple(refs)))
    # the root cause's consequences first, each in the order they began (untimed ones last)
    out.sort(key=lambda g: (not g.of_root, g.first is None, g.first.timestamp() if g.first else 0, g.kind))
    return out


def _symptoms_total(doc: Mapping, symptoms: Sequence[Mark]) -> int:
    """Every symptom line of the verdict: the document's count (it may list only the first ones)."""
    total = doc.get("symptoms_total")
    return max(int(total), len(symptoms)) if isinstance(total, int) else len(symptoms)


def build_timeline(doc: Mapping, events: Iterable[Event] = (), *, margin_seconds: int = 300,
                   max_bins: int | None = None) -> Timeline:
    """The timeline of one job from its verdict document and its events.

    `margin_seconds` is how far around the job's start and end context events are still drawn (the engine's
    window, rules/causal-graph.yaml). Events that are causes or symptoms but not in the verdict lie outside
    the job window: they are listed apart, not drawn.
    """
    job = dict(doc.get("job") or {})
    start, end = _time(job.get("start")), _time(job.get("end"))
    rows: set[str] = set()
    root = _mark(doc["root_cause"], "root_cause", rows) if doc.get("root_cause") else None
    causes = [_mark(c, "cause", rows) for c in doc.get("other_causes") or ()]
    symptoms = [_mark(s, "symptom", rows) for s in doc.get("symptoms") or ()]
    known = {_key(d) for d in [doc.get("root_cause") or {}, *(doc.get("other_causes") or ()),
                               *(doc.get("symptoms") or ())]}
    lo = start - timedelta(seconds=margin_seconds) if start else None
    hi = end + timedelta(seconds=margin_seconds) if end else None
    context, outside = [], []
    for ev in events:
        if _key({"rule": ev.rule, "location": ev.location, "kind": ev.kind, "line": ev.line}) in known:
            continue
        inside = ev.time is None or ((lo is None or ev.time >= lo) and (hi is None or ev.time <= hi))
        if ev.role == "context":
            if inside:
                context.append(_event_mark(ev, "context", rows))
        elif not inside:
            outside.append(_event_mark(ev, "outside_window", set()))  # listed, not drawn: adds no row
    coverage = tuple(dict(c) for c in doc.get("coverage") or ())
    for c in coverage:
        if c.get("node"):
            rows.add(c["node"])
    culprits = tuple((c["node"], c.get("gpu")) for c in doc.get("culprits") or ())
    rows.update(n for n, _ in culprits)
    order = list(job.get("nodes") or ())
    ordered = order + sorted(r for r in rows if r not in order and r != JOB_ROW)
    if JOB_ROW in rows:
        ordered.append(JOB_ROW)

    drawn = ([root] if root else []) + causes + symptoms
    domain = _focus(drawn or context, (start, end))
    if max_bins is None:
        max_bins = max(MIN_BINS, min(MAX_BINS, CELL_BUDGET // max(1, len(ordered))))
    width = nice_bin_seconds((domain[1] - domain[0]).total_seconds(), max_bins)
    first_consequence: dict[str, datetime] = {}
    for m in symptoms:
        if m.explained_by == "root_cause" and m.time is not None:
            if m.row not in first_consequence or m.time < first_consequence[m.row]:
                first_consequence[m.row] = m.time
    outside.sort(key=lambda m: (m.time is None, m.time.timestamp() if m.time else 0, m.row))
    return Timeline(
        job=job, outcome=doc.get("outcome") or "unknown", confidence=doc.get("confidence") or "",
        action=doc.get("action") or "", explanation=doc.get("explanation") or "", culprits=culprits,
        rows=tuple(ordered), root=root, causes=tuple(causes), bins=tuple(_bins(symptoms, width)),
        context=tuple(context), outside=tuple(outside), groups=tuple(_groups(symptoms)), coverage=coverage,
        domain=domain, bin_seconds=width, symptoms_total=_symptoms_total(doc, symptoms), job_start=start, job_end=end,
        rules_version=doc.get("rules_version") or "", first_consequence=first_consequence)
