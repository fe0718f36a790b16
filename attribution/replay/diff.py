"""What a re-derived verdict changes: outcome, root cause (kind, node) or culprits. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Side:
    outcome: str
    root: str | None  # the root cause's kind
    root_node: str | None
    culprits: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"outcome": self.outcome, "root_cause": self.root, "root_node": self.root_node,
                "culprits": list(self.culprits)}

    def show(self) -> str:
        root = f" root {self.root}" + (f"@{self.root_node}" if self.root_node else "") if self.root else ""
        cul = f" culprits {','.join(self.culprits)}" if self.culprits else ""
        return f"{self.outcome}{root}{cul}"


@dataclass(frozen=True)
class Change:
    cluster: str
    job_id: str
    job_ref: int
    before: Side
    after: Side
    rules_before: str | None
    rules_after: str

    @property
    def transition(self) -> str:
        return f"{self.before.outcome} -> {self.after.outcome}"

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "job_id": self.job_id, "before": self.before.to_dict(),
                "after": self.after.to_dict(), "transition": self.transition,
                "rules_version_before": self.rules_before, "rules_version_after": self.rules_after}


def side_of_verdict(v) -> Side:
    root = v.root_cause
    return Side(v.outcome, root.kind if root else None, root.node if root else None,
                tuple(sorted(n for n, _ in v.culprits)))


def totals(changes: list[Change]) -> list[tuple[str, int]]:
    """Jobs per transition, most first, then by name."""
    c = Counter(ch.transition for ch in changes)
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))


def report(changes: list[Change], examined: int) -> dict:
    return {"examined": examined, "changed": len(changes),
            "totals": [{"transition": t, "jobs": n} for t, n in totals(changes)],
            "jobs": [c.to_dict() for c in changes]}


def render_text(changes: list[Change], examined: int) -> str:
    out = []
    for c in changes:
        out.append(f"{c.cluster}/{c.job_id}: {c.before.show()}  ->  {c.after.show()}")
    if changes:
        out.append("")
    for t, n in totals(changes):
        out.append(f"{t}: {n}")
    out.append(f"{len(changes)} of {examined} failed job(s) with kept evidence would change")
    return "\n".join(out)
