"""What an alert says, from a verdict or a drain decision row: its key (what one alert stands for), a one-line
summary and the details. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import quote


@dataclass(frozen=True)
class Alert:
    event: str  # verdict | drain
    key: str  # alerts with one key are sent once per cooldown
    summary: str
    labels: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, object] = field(default_factory=dict)
    link: str | None = None

    def as_dict(self) -> dict:
        """The alert as JSON values (what the store keeps of a pending delivery)."""
        return {"event": self.event, "key": self.key, "summary": self.summary, "labels": dict(self.labels),
                "details": dict(self.details), "link": self.link}

    @classmethod
    def from_dict(cls, doc: Mapping) -> Alert:
        return cls(doc["event"], doc["key"], doc["summary"], dict(doc.get("labels") or {}),
                   dict(doc.get("details") or {}), doc.get("link"))


def verdict_alert(row: Mapping, dashboard: str | None) -> Alert:
    """A new infrastructure verdict: keyed by where and what (node, outcome, root kind), so a node that fails a
    hundred jobs in an hour is one alert, not a hundred."""
    where = row["root_node"] or (row["culprit_nodes"] or [None])[0] or f"job {row['job_id']}"
    kind = row["root_kind"] or "no root event"
    code = f" {row['root_code']}" if row.get("root_code") is not None else ""
    # culprits only the job's own output names (docs/verdict.md "Evidence a user could have written"): the job's
    # owner could have printed them; said in the alert, as the verdict says it
    cev = list(row.get("culprit_evidence") or [])
    evidence = "job_output" if cev and all(e == "job_output" for e in cev) else "system"
    summary = (f"{row['outcome']} on {row['cluster']}/{where}: {kind}{code} failed job {row['job_id']} "
               f"(action {row['action']})" + (", named by job output only" if evidence == "job_output" else ""))
    link = (f"{dashboard.rstrip('/')}/jobs/{quote(row['cluster'], safe='')}/{quote(row['job_id'], safe='')}"
            if dashboard else None)
    return Alert("verdict", f"verdict:{row['cluster']}:{where}:{row['outcome']}:{kind}", summary,
                 {"cluster": row["cluster"], "node": str(where), "outcome": row["outcome"], "kind": kind,
                  "evidence": evidence},
                 {"job_id": row["job_id"], "action": row["action"], "confidence": row["confidence"],
                  "culprits": list(row["culprit_nodes"] or []), "culprit_evidence": cev,
                  "explanation": row["explanation"], "verdict_id": row["id"]}, link)


def drain_alert(row: Mapping, dashboard: str | None) -> Alert:
    """A drain decision (applied, capped, failed, resumed): keyed by node and decision."""
    summary = f"drain {row['decision']}: {row['cluster']}/{row['node']}" + (f": {row['reason']}" if row["reason"] else "")
    link = (f"{dashboard.rstrip('/')}/nodes/{quote(row['cluster'], safe='')}/{quote(row['node'], safe='')}"
            if dashboard else None)
    return Alert("drain", f"drain:{row['cluster']}:{row['node']}:{row['decision']}", summary,
                 {"cluster": row["cluster"], "node": row["node"], "decision": row["decision"]},
                 {"reason": row["reason"], "detail": row["detail"], "actor": row["actor"], "action_id": row["id"]},
                 link)
