"""The drain policy replayed on the stored history: the plan as it would have been at a past time, and a
backtest over a period (when each node would have been drained, what that would have prevented and cost).

Policies are staged into drain_policies/drain_conditions inside a transaction that is rolled back, so a backtest
never changes the policy in force. See docs/replay.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine, text

from attribution import frozen

from attribution.drain.policy import Candidate, DrainPolicy
from attribution.store.drain import insert_conditions

INFRA_SQL = "('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')"


def stage_policy(conn: Connection, policy: DrainPolicy) -> None:
    """Make `policy` known to drain_candidates_at by its version (in the caller's transaction)."""
    new = conn.execute(text(
        "INSERT INTO attribution.drain_policies (version, reason_prefix, caps, document) "
        "VALUES (:v, :p, CAST(:caps AS jsonb), CAST(:doc AS jsonb)) ON CONFLICT (version) DO NOTHING RETURNING 1"),
        {"v": policy.version, "p": policy.reason_prefix, "caps": json.dumps(policy.caps),
         "doc": json.dumps(dict(policy.document), default=str)}).first()
    if new is None:
        return
    insert_conditions(conn, policy)


def plan_at(conn: Connection, at: datetime, policy_version: str, cluster: str | None = None) -> list[Candidate]:
    rows = conn.execute(text(
        "SELECT cluster, node, reason, evidence, score FROM attribution.drain_candidates_at(:t, :v) "
        "WHERE CAST(:c AS text) IS NULL OR cluster = :c ORDER BY score DESC, cluster, node"),
        {"t": at, "v": policy_version, "c": cluster}).all()
    return [Candidate(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]


def plan_as_of(engine: Engine, policy: DrainPolicy, at: datetime, cluster: str | None = None) -> list[Candidate]:
    """The plan `policy` would have made at `at` from the evidence of up to then."""
    with engine.connect() as conn:
        with conn.begin() as tx:
            stage_policy(conn, policy)
            out = plan_at(conn, at, policy.version, cluster)
            tx.rollback()
    return out


@dataclass
class Drained:
    cluster: str
    node: str
    at: datetime
    reason: str
    conditions: list[str] = field(default_factory=list)  # the conditions met when it was drained
    prevented_jobs: list[str] = field(default_factory=list)
    prevented_gpu_hours: float = 0.0
    node_hours: float = 0.0

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "node": self.node, "drained_at": self.at.isoformat().replace("+00:00", "Z"),
                "reason": self.reason, "conditions": self.conditions, "prevented_jobs": self.prevented_jobs,
                "prevented_gpu_hours": round(self.prevented_gpu_hours, 3), "node_hours": round(self.node_hours, 3)}


def totals(drained: list[Drained]) -> dict:
    return {"nodes_drained": len(drained),
            "prevented_failed_jobs": sum(len(d.prevented_jobs) for d in drained),
            "prevented_gpu_hours": round(sum(d.prevented_gpu_hours for d in drained), 3),
            "node_hours_drained": round(sum(d.node_hours for d in drained), 3)}


@dataclass
class Recurrence:
    """What a policy's recurrence conditions change: the same replay without them (its one-shot conditions only),
    and the difference, per node and in total."""

    conditions: list[str]
    without: list[Drained]
    drained: list[Drained]

    def changed(self) -> list[dict]:
        """The nodes the recurrence conditions drain that the one-shot ones would not, or drain sooner."""
        before = {(d.cluster, d.node): d for d in self.without}
        out = []
        for d in self.drained:
            b = before.get((d.cluster, d.node))
            if b is None or d.at < b.at:
                out.append({"cluster": d.cluster, "node": d.node,
                            "drained_at": d.to_dict()["drained_at"],
                            "without": None if b is None else b.to_dict()["drained_at"],
                            "saved_failed_jobs": len(d.prevented_jobs) - (0 if b is None else len(b.prevented_jobs)),
                            "saved_gpu_hours": round(d.prevented_gpu_hours - (0 if b is None else
                                                                              b.prevented_gpu_hours), 3)})
        return out

    def to_dict(self) -> dict:
        with_, without = totals(self.drained), totals(self.without)
        return {"conditions": self.conditions, "without": without,
                "saved_failed_jobs": with_["prevented_failed_jobs"] - without["prevented_failed_jobs"],
                "saved_gpu_hours": round(with_["prevented_gpu_hours"] - without["prevented_gpu_hours"], 3),
                "extra_node_hours": round(with_["node_hours_drained"] - without["node_hours_drained"], 3),
                "nodes": self.changed()}


@dataclass
class Backtest:
    policy: str  # its version
    label: str  # what the user named it (the file)
    drained: list[Drained]
    recurrence: Recurrence | None = None

    def totals(self) -> dict:
        return totals(self.drained)

    def to_dict(self) -> dict:
        return {"policy": self.label, "version": self.policy, **self.totals(),
                "nodes": [d.to_dict() for d in self.drained],
                "recurrence": None if self.recurrence is None else self.recurrence.to_dict()}


def one_shot_only(policy: DrainPolicy) -> DrainPolicy | None:
    """The policy without its recurrence conditions (None when it has none, or nothing else)."""
    kept = tuple(c for c in policy.conditions if not c.recurrence)
    if len(kept) == len(policy.conditions) or not kept:
        return None
    ids = {c.id for c in kept}
    doc = dict(policy.document, conditions=[c for c in policy.document.get("conditions", []) if c.get("id") in ids])
    return frozen.replace(policy, version=f"{policy.version}~one-shot", conditions=kept, document=doc)


def _instants(conn: Connection, since: datetime, until: datetime, cluster: str | None) -> list[datetime]:
    """The times the plan can change at: each infrastructure cause event and each job end in the period."""
    rows = conn.execute(text(f"""
        SELECT t FROM (
          SELECT occurred_at AS t FROM attribution.events
          WHERE occurred_at BETWEEN :s AND :u AND role = 'cause' AND node IS NOT NULL
            AND coalesce(outcome, '') IN {INFRA_SQL} AND (CAST(:c AS text) IS NULL OR cluster = :c)
          UNION
          SELECT end_time FROM attribution.jobs
          WHERE end_time BETWEEN :s AND :u AND (CAST(:c AS text) IS NULL OR cluster = :c)
          UNION SELECT CAST(:s AS timestamptz)
        ) x ORDER BY t"""), {"s": since, "u": until, "c": cluster}).all()
    return [r[0] for r in rows]


def _prevented(conn: Connection, d: Drained, until: datetime) -> None:
    """Failed jobs that started on the node after the drain and whose verdict names it a culprit: the drain
    would have kept them off it. GPU-hours: the whole job's GPUs x its run time."""
    rows = conn.execute(text(f"""
        SELECT j.job_id, coalesce(j.gpus_per_node, 1) * cardinality(j.nodes)
                         * extract(epoch FROM j.end_time - j.start_time) / 3600.0
        FROM attribution.jobs j JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
        WHERE j.cluster = :c AND :n = ANY (v.culprit_nodes) AND v.outcome IN {INFRA_SQL}
          AND j.start_time >= :t AND j.end_time <= :u
        ORDER BY j.start_time, j.id"""), {"c": d.cluster, "n": d.node, "t": d.at, "u": until}).all()
    d.prevented_jobs = [r[0] for r in rows]
    d.prevented_gpu_hours = float(sum(r[1] for r in rows))
    d.node_hours = max(0.0, (until - d.at).total_seconds() / 3600)


def _replay(conn: Connection, policy: DrainPolicy, times: list[datetime], until: datetime,
            cluster: str | None) -> list[Drained]:
    drained: dict[tuple[str, str], Drained] = {}
    for t in times:
        for c in plan_at(conn, t, policy.version, cluster):
            if (c.cluster, c.node) not in drained:
                met = sorted({e["condition"] for e in c.evidence or [] if isinstance(e, dict)})
                drained[(c.cluster, c.node)] = Drained(c.cluster, c.node, t, c.reason, met)
    result = sorted(drained.values(), key=lambda d: (d.at, d.cluster, d.node))
    for d in result:
        _prevented(conn, d, until)
    return result


def backtest(engine: Engine, policies: list[tuple[str, DrainPolicy]], since: datetime, until: datetime,
             cluster: str | None = None) -> list[Backtest]:
    """Replay each (label, policy) over [since, until]: a node is drained the first time the plan at that time
    names it, and stays drained to the end of the period (node-hours drained = until - drain time). A policy with
    recurrence conditions is replayed a second time without them, to say what they change."""
    out = []
    with engine.connect() as conn:
        with conn.begin() as tx:
            for _, policy in policies:
                stage_policy(conn, policy)
            times = _instants(conn, since, until, cluster)
            for label, policy in policies:
                drained = _replay(conn, policy, times, until, cluster)
                recurrence = None
                base = one_shot_only(policy)
                if base is not None:
                    stage_policy(conn, base)
                    recurrence = Recurrence([c.id for c in policy.conditions if c.recurrence],
                                            _replay(conn, base, times, until, cluster), drained)
                out.append(Backtest(policy.version, label, drained, recurrence))
            tx.rollback()
    return out


def render_text(results: list[Backtest]) -> str:
    lines = []
    for b in results:
        t = b.totals()
        lines.append(f"policy {b.label} ({b.policy}): {t['nodes_drained']} node(s) drained, "
                     f"{t['prevented_failed_jobs']} failed job(s) prevented ({t['prevented_gpu_hours']} GPU-hours), "
                     f"{t['node_hours_drained']} node-hours drained")
        for d in b.drained:
            x = d.to_dict()
            lines.append(f"  {d.cluster}/{d.node:<16} drained {x['drained_at']}  prevented {len(d.prevented_jobs)} "
                         f"job(s), {x['prevented_gpu_hours']} GPU-hours; {x['node_hours']} node-hours  {d.reason}")
        if b.recurrence is not None:
            r = b.recurrence.to_dict()
            lines.append(f"  recurrence conditions ({', '.join(r['conditions'])}) save {r['saved_gpu_hours']} "
                         f"GPU-hours, {r['saved_failed_jobs']} failed job(s), for {r['extra_node_hours']} more "
                         f"node-hours drained; without them {r['without']['nodes_drained']} node(s) drained, "
                         f"{r['without']['prevented_gpu_hours']} GPU-hours prevented")
            for n in r["nodes"]:
                lines.append(f"    {n['cluster']}/{n['node']:<14} drained {n['drained_at']} "
                             + (f"instead of {n['without']}" if n["without"] else "(never without them)")
                             + f": {n['saved_gpu_hours']} GPU-hours, {n['saved_failed_jobs']} failed job(s) saved")
    return "\n".join(lines)
