"""Why a node is or is not a drain candidate: each condition of the policy, how far the node's evidence goes
towards it, and what it lacks. Pure.

The progress comes from the store (`drain_conditions_at`, one row per condition and GPU with evidence: how much
counts, how much was seen in the window, the node's last reboot or resume); this module says it in words:
    nvlink-weekly: 5 weeks of 3 needed: candidate
    gpu-lost: 1 event, but after it the node rebooted at 2026-12-01 09:12:00Z (kernel): 0 of 1 counted since
    nvlink-repeat: 1 job of 2 needed within 7 days
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

#: A unit of drain_conditions_at (what a condition counts) in the singular.
SINGULAR = {"events": "event", "jobs": "job", "weeks": "week", "users": "user", "failed jobs": "failed job"}
#: How a reset reads after "the node ...".
RESET_WORDS = {"boot": "rebooted", "resume": "was resumed"}
#: Who saw a reset, for the reader.
SOURCE_WORDS = {"kernel": "its kernel's banner", "context": "a job's boot time", "slurm": "Slurm",
                "attribution": "attribution drain resume"}


@dataclass(frozen=True)
class ConditionProgress:
    condition: str
    recurrence: bool
    needed: int
    unit: str
    window_days: int
    counted: int = 0  # what counts towards the condition now
    seen: int = 0  # what the window holds, also what the last reboot or resume cleared (one-shot conditions)
    gpu: str | None = None
    weeks: tuple = ()
    reset_what: str | None = None
    reset_at: datetime | None = None
    reset_source: str | None = None

    @property
    def met(self) -> bool:
        return self.counted >= self.needed

    @property
    def cleared(self) -> int:
        return 0 if self.recurrence else max(0, self.seen - self.counted)

    @property
    def nearness(self) -> tuple:
        return (self.met, min(self.counted, self.needed) / self.needed, min(self.seen, self.needed) / self.needed)

    def text(self) -> str:
        where = f" on gpu {self.gpu}" if self.gpu else ""
        if self.met:
            return f"{self.condition}: {_count(self.counted, self.unit)}{where} of {self.needed} needed: candidate"
        if self.cleared and self.reset_at is not None:
            did = RESET_WORDS.get(self.reset_what or "", self.reset_what or "changed")
            by = SOURCE_WORDS.get(self.reset_source or "", self.reset_source or "")
            return (f"{self.condition}: {_count(self.seen, self.unit)}{where}, but after it the node {did} at "
                    f"{self.reset_at:%Y-%m-%d %H:%M:%S}Z ({by}): {self.counted} of {self.needed} counted since")
        if not self.seen:
            return f"{self.condition}: nothing within {self.window_days} days"
        return (f"{self.condition}: {_count(self.counted, self.unit)}{where} of {self.needed} needed within "
                f"{self.window_days} days")

    def to_dict(self) -> dict:
        return {"condition": self.condition, "recurrence": self.recurrence, "counted": self.counted,
                "needed": self.needed, "unit": self.unit, "window_days": self.window_days, "seen": self.seen,
                "cleared": self.cleared, "met": self.met, "gpu": self.gpu, "weeks": list(self.weeks),
                "reset": None if self.reset_at is None else {"what": self.reset_what, "at": self.reset_at,
                                                             "source": self.reset_source},
                "text": self.text()}


def _count(n: int, unit: str) -> str:
    return f"{n} {SINGULAR.get(unit, unit) if n == 1 else unit}"


def progress(conditions: Iterable[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]]) -> list[ConditionProgress]:
    """Each condition of the policy (drain_conditions rows: condition_id, recurrence, min_count, window_days,
    unit) with the node's best group for it (the GPU nearest to it), nearest first."""
    best: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        cur = best.get(r["condition_id"])
        if cur is None or (r["counted"], r["seen"]) > (cur["counted"], cur["seen"]):
            best[r["condition_id"]] = r
    out = []
    for c in conditions:
        r = best.get(c["condition_id"])
        base = dict(condition=c["condition_id"], recurrence=bool(c["recurrence"]), needed=int(c["min_count"]),
                    unit=c["unit"], window_days=int(c["window_days"]))
        if r is None:
            out.append(ConditionProgress(**base))
            continue
        out.append(ConditionProgress(**base, counted=int(r["counted"]), seen=int(r["seen"]), gpu=r.get("gpu"),
                                     weeks=tuple(r.get("weeks") or ()), reset_what=r.get("reset_what"),
                                     reset_at=r.get("reset_at"), reset_source=r.get("reset_source")))
    out.sort(key=lambda p: p.nearness, reverse=True)
    return out


def summary(items: list[ConditionProgress]) -> str:
    """One line: the conditions met, else the nearest one and what it lacks, and any other whose evidence the
    node's last reboot or resume cleared."""
    met = [p for p in items if p.met]
    if met:
        return "; ".join(p.text() for p in met)
    near = [p for p in items if p.seen]
    if not near:
        return "no evidence for any condition of the drain policy"
    cleared = [p for p in near[1:] if p.cleared]  # what a reboot or resume took off the plan, said too
    return "; ".join(["nearest " + near[0].text(), *(p.text() for p in cleared)])
