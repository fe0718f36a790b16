"""The node's life in the store (migration 0021): node_life, what the store learned of each node's state changes
(boots, Slurm's drains and resumes, `attribution drain resume`), and node_states, Slurm's last view of each node.

The one-shot drain conditions count only the evidence from after a node's last boot or resume (drain_conditions_at,
sql/50_drain_candidates.sql). Writing a change twice adds nothing (its key is node, cluster, what, time and
source); the same boot seen by several sources (a kernel banner, a context's boot_time, Slurm's BootTime) is a row
each, seconds apart, and reads as one (`merged`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Mapping

from sqlalchemy import Connection, Engine, text

from attribution.drain.life import SAME_BOOT, LifeChange, from_slurm
from attribution.drain.policy import NodeState, valid_node_name

__all__ = ["LifeChange", "record_changes", "sync", "node_life", "node_state", "merged"]

_INSERT = """
INSERT INTO attribution.node_life (node, cluster, at, what, source, actor, detail)
SELECT x.node, CAST(:c AS text), x.at, x.what, x.source, x.actor, x.detail
FROM unnest(CAST(:nodes AS text[]), CAST(:ats AS timestamptz[]), CAST(:whats AS text[]), CAST(:sources AS text[]),
            CAST(:actors AS text[]), CAST(:details AS text[])) AS x(node, at, what, source, actor, detail)
ORDER BY x.node, x.what, x.at, x.source
ON CONFLICT DO NOTHING"""


def record_changes(conn: Connection, cluster: str, changes: Iterable[LifeChange]) -> int:
    """Keep the changes (in the caller's transaction; one statement). Names that are no Slurm node name are left
    out. Returns how many were new."""
    rows = sorted({c for c in changes if valid_node_name(c.node)}, key=lambda c: (c.node, c.what, c.at, c.source))
    if not rows:
        return 0
    r = conn.execute(text(_INSERT), {
        "c": cluster, "nodes": [c.node for c in rows], "ats": [c.at for c in rows], "whats": [c.what for c in rows],
        "sources": [c.source for c in rows], "actors": [c.actor for c in rows],
        "details": [(c.detail or "")[:500] or None for c in rows]})
    return int(r.rowcount or 0)


_STATES = """
SELECT node, state, reason, reason_user, reason_at, boot_time, slurmd_start, seen_at FROM attribution.node_states
WHERE cluster = :c"""
_UPSERT_STATE = """
INSERT INTO attribution.node_states (node, cluster, state, reason, reason_user, reason_at, boot_time, slurmd_start,
                                     seen_at)
VALUES (:node, :c, :state, :reason, :reason_user, :reason_at, :boot_time, :slurmd_start, :seen)
ON CONFLICT (node, cluster) DO UPDATE SET state = excluded.state, reason = excluded.reason,
    reason_user = excluded.reason_user, reason_at = excluded.reason_at, boot_time = excluded.boot_time,
    slurmd_start = excluded.slurmd_start, seen_at = excluded.seen_at"""


def sync(engine: Engine, cluster: str, nodes: Mapping[str, NodeState], seen: datetime) -> list[LifeChange]:
    """Record Slurm's view of the cluster's nodes at `seen`: what changed since the last view (drain.life.from_slurm)
    goes to node_life, the view to node_states. Returns the changes, in node order."""
    with engine.begin() as c:
        # one sync of a cluster at a time: two timers' runs would both see the same change
        c.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                  {"k": f"attribution.sync_nodes/{cluster}"})
        before = {r[0]: (NodeState(r[0], r[1], r[2], r[3], r[4], r[5], r[6]), r[7])
                  for r in c.execute(text(_STATES), {"c": cluster})}
        changes: list[LifeChange] = []
        for name in sorted(nodes):
            if not valid_node_name(name):
                continue
            prev, prev_seen = before.get(name, (None, None))
            changes += from_slurm(prev, prev_seen, nodes[name], seen)
        record_changes(c, cluster, changes)
        rows = [{"node": n.name, "c": cluster, "state": n.state, "reason": n.reason, "reason_user": n.reason_user,
                 "reason_at": n.reason_at, "boot_time": n.boot_time, "slurmd_start": n.slurmd_start, "seen": seen}
                for name, n in sorted(nodes.items()) if valid_node_name(name)]
        if rows:
            c.execute(text(_UPSERT_STATE), rows)
    return changes


NODE_LIFE = """
SELECT at, what, source, actor, detail FROM attribution.node_life
WHERE node = :node AND cluster = :cluster AND at >= :since ORDER BY at DESC, what, source LIMIT :lim"""
NODE_STATE = """
SELECT state, reason, reason_user, reason_at, boot_time, slurmd_start, seen_at FROM attribution.node_states
WHERE node = :node AND cluster = :cluster"""


def merged(rows: list[dict]) -> list[dict]:
    """A node's life newest first, the rows of one boot seen by several sources (seconds apart) as one, with every
    source that saw it."""
    out: list[dict] = []
    for r in rows:
        last = out[-1] if out else None
        if (last is not None and r["what"] == "boot" == last["what"]
                and abs(last["at"] - r["at"]) <= SAME_BOOT):
            last["sources"].append(r["source"])
            continue
        out.append({**r, "sources": [r["source"]]})
    return out


def node_life(conn: Connection, cluster: str, node: str, since: datetime, limit: int = 100) -> list[dict]:
    rows = [dict(r) for r in conn.execute(text(NODE_LIFE), {"node": node, "cluster": cluster, "since": since,
                                                             "lim": limit}).mappings()]
    return merged(rows)


def node_state(conn: Connection, cluster: str, node: str) -> dict | None:
    r = conn.execute(text(NODE_STATE), {"node": node, "cluster": cluster}).mappings().first()
    return None if r is None else dict(r)
