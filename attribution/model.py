"""The values that flow through the pipeline: execution context, observation, event, coverage, verdict.

Everything here is a frozen value class (attribution.frozen) and depends on nothing else of ours. Times are timezone-aware UTC
datetimes, or None when the source line carried no usable timestamp.
"""

from __future__ import annotations

import re

from datetime import datetime, timezone
from types import MappingProxyType
from typing import Mapping

from attribution.frozen import Value, field

UTC = timezone.utc

#: Outcomes whose causes are infrastructure faults: they name culprit nodes. (The closed lists of roles,
#: outcomes and actions are the rule pack's vocabulary: rules/schema/defs.schema.json.)
INFRASTRUCTURE_OUTCOMES = frozenset({"gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host"})
#: Every outcome a verdict may have, in the contract's order (the schema's `outcome` enum: tests/test_model.py
#: holds the two together)
OUTCOMES = ("gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host", "application", "scheduler", "unknown",
            "none")

#: Who could have written the evidence (docs/bundle.md "Trust"): the job's own program wrote its output; the
#: system wrote the rest (kernel, Fabric Manager, node logs, scheduler state, telemetry).
EVIDENCE = ("system", "job_output")
USER_WRITTEN_SOURCES = frozenset({"job"})


def evidence_of(source: str) -> str:
    """`job_output` for what the job's program could have printed, else `system`."""
    return "job_output" if source in USER_WRITTEN_SOURCES else "system"


def normalize_gpu(value: str | None) -> str | None:
    """PCI ids in every printed form (`PCI:0000:9b:00`, `00000000:86:00.0`, `3b:00.0`) to `dddd:bb:dd`."""
    if not value:
        return None
    v = value.strip().lower()
    if v.startswith("pci:"):
        v = v[4:]
    parts = v.split(":")
    if len(parts) == 2:
        parts = ["0000"] + parts
    if len(parts) != 3:
        return value.strip().lower()
    domain, bus, dev = parts
    dev = dev.split(".", 1)[0]
    domain = domain[-4:].rjust(4, "0")
    return f"{domain}:{bus.rjust(2, '0')}:{dev.rjust(2, '0')}"


def _frozen_map(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m or {}))


_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


class ExecutionContext(Value):
    """Who ran what, where and when: the scope of one job."""

    cluster: str
    job_id: str
    nodes: tuple[str, ...]
    scheduler: str = "static"
    user: str | None = None
    partition: str | None = None
    state: str = "UNKNOWN"
    exit_code: str | None = None
    failed_node: str | None = None
    tasks_per_node: int | None = None
    srun_tasks_per_node: int | None = None
    start: datetime | None = None
    end: datetime | None = None
    timezone: str = "UTC"
    boot_time: Mapping[str, datetime] = field(default_factory=lambda: MappingProxyType({}))
    gpus_per_node: int | None = None
    job_name: str | None = None  # what the user named the job (Slurm JobName): user-written, see store/recurrence

    def __post_init__(self) -> None:
        object.__setattr__(self, "boot_time", _frozen_map(self.boot_time))

    def node_of_rank(self, rank: int | None) -> str | None:
        """Block distribution: rank N runs on node N // tasks_per_node."""
        if rank is None or not self.tasks_per_node or rank < 0:
            return None
        idx = rank // self.tasks_per_node
        return self.nodes[idx] if idx < len(self.nodes) else None

    def node_of_task(self, task: int | None) -> str | None:
        """srun task ids map through srun_tasks_per_node (default tasks_per_node)."""
        per = self.srun_tasks_per_node or self.tasks_per_node
        if task is None or not per or task < 0:
            return None
        idx = task // per
        return self.nodes[idx] if idx < len(self.nodes) else None

    def resolve_host(self, host: str | None) -> str | None:
        """A host name as printed in a log (maybe fully qualified) to one of the job's nodes."""
        if not host:
            return None
        if host in self.nodes:
            return host
        # Host names are case-insensitive (srun prints "Orion-01-01" for node orion-01-01); an IPv4
        # address is a name of its own, never "first label + domain".
        by_lower = {n.lower(): n for n in self.nodes}
        h = host.lower()
        if h in by_lower:
            return by_lower[h]
        if _IPV4.match(h):
            return None
        return by_lower.get(h.split(".", 1)[0])


class Observation(Value):
    """One log record (a line, or a multi-line record joined) with its prefix taken apart."""

    source: str
    node: str | None
    location: str
    text: str
    line: str
    time: datetime | None = None
    host: str | None = None
    rank: int | None = None
    label: int | None = None
    flags: frozenset[str] = frozenset()

    def __init__(self, source: str, node: str | None, location: str, text: str, line: str,
                 time: datetime | None = None, host: str | None = None, rank: int | None = None,
                 label: int | None = None, flags: frozenset[str] = frozenset()) -> None:
        # one per flagged line: written out (attribution.frozen; tests/test_frozen.py checks it against the fields)
        put = object.__setattr__
        put(self, "source", source)
        put(self, "node", node)
        put(self, "location", location)
        put(self, "text", text)
        put(self, "line", line)
        put(self, "time", time)
        put(self, "host", host)
        put(self, "rank", rank)
        put(self, "label", label)
        put(self, "flags", flags)


class Event(Value):
    """A normalized fault event produced by a rule from one observation."""

    kind: str
    role: str
    rule: str
    source: str
    location: str
    line: str
    message: str
    node: str | None = None
    gpu: str | None = None
    code: int | None = None
    rank: int | None = None
    time: datetime | None = None
    outcome: str | None = None
    action: str | None = None
    severity: str = "info"
    fields: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __init__(self, kind: str, role: str, rule: str, source: str, location: str, line: str, message: str,
                 node: str | None = None, gpu: str | None = None, code: int | None = None, rank: int | None = None,
                 time: datetime | None = None, outcome: str | None = None, action: str | None = None,
                 severity: str = "info", fields: Mapping[str, str] | None = None) -> None:
        # one per matched line: written out (attribution.frozen; tests/test_frozen.py checks it against the fields)
        put = object.__setattr__
        put(self, "kind", kind)
        put(self, "role", role)
        put(self, "rule", rule)
        put(self, "source", source)
        put(self, "location", location)
        put(self, "line", line)
        put(self, "message", message)
        put(self, "node", node)
        put(self, "gpu", gpu)
        put(self, "code", code)
        put(self, "rank", rank)
        put(self, "time", time)
        put(self, "outcome", outcome)
        put(self, "action", action)
        put(self, "severity", severity)
        put(self, "fields", _frozen_map(fields))

    @property
    def evidence(self) -> str:
        """Who could have written the line behind this event: `system` or `job_output` (from its source, never
        from what a report claims)."""
        return evidence_of(self.source)

    def sort_key(self) -> tuple:
        """A total order independent of the order in which events were produced."""
        t = self.time.timestamp() if self.time else float("inf")
        return (t, self.node or "", self.location, self.rule, self.kind, self.gpu or "",
                -1 if self.code is None else self.code, self.line, self.message)


class Coverage(Value):
    """What one collector saw of one source on one node (or of one job file)."""

    source: str
    node: str | None
    status: str  # ok | empty | missing | error
    lines: int = 0
    reason: str | None = None
    file: str | None = None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        d: dict = {"source": self.source, "node": self.node, "status": self.status, "lines": self.lines}
        if self.file:
            d["file"] = self.file
        if self.reason:
            d["reason"] = self.reason
        if self.notes:
            d["notes"] = list(self.notes)
        return d


class Symptom(Value):
    """An event correlation did not take for a cause, and what explains it."""

    event: Event
    explained_by: str | None  # "root_cause", an explaining event's reference, or None


class Verdict(Value):
    """What broke one job: the outcome, the root cause and culprits, the symptoms, what was seen."""

    context: ExecutionContext
    outcome: str
    confidence: str
    action: str
    root_cause: Event | None
    culprits: tuple[tuple[str, str | None], ...]
    symptoms: tuple[Symptom, ...]
    explanation: str
    coverage: tuple[Coverage, ...]
    rules_version: str
    causes: tuple[Event, ...] = ()  # every cause left unexplained, root first
    #: per culprit, in the same order: `system` when system-written evidence names it, else `job_output`
    culprit_evidence: tuple[str, ...] = ()
    # when the symptoms were folded as they streamed (correlate.digest): `symptoms` lists the first of them, these
    # count them all: the total, and (kind, node, count, first time, last time) per group
    symptoms_total: int | None = None
    symptom_groups: tuple[tuple, ...] | None = None

    def evidence_of_culprit(self, i: int) -> str:
        return self.culprit_evidence[i] if i < len(self.culprit_evidence) else "system"
    cost: Mapping[str, object] | None = None  # what the failure lost (correlate.cost.failure_cost)
