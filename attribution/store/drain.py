"""The store's side of drain decisions: loading the policy, reading candidates, the audit, node resumes."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta, timezone
from typing import Iterable, Iterator

from sqlalchemy import Connection, Engine, text

from attribution.drain.explain import ConditionProgress, progress
from attribution.drain.policy import Candidate, Decision, DrainPolicy

UTC = timezone.utc


def load_policy(engine: Engine, policy: DrainPolicy) -> None:
    """Make `policy` the one the drain_candidates view evaluates (idempotent; keyed by the policy's version)."""
    with engine.begin() as c:
        c.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('attribution.drain_policy', 0))"))
        newest = c.execute(text("SELECT version FROM attribution.drain_policies ORDER BY loaded_at DESC, version "
                                "LIMIT 1")).scalar()
        if newest == policy.version:
            return
        c.execute(text(
            "INSERT INTO attribution.drain_policies (version, reason_prefix, caps, document, loaded_at) "
            "VALUES (:v, :p, CAST(:caps AS jsonb), CAST(:doc AS jsonb), now()) "
            "ON CONFLICT (version) DO UPDATE SET loaded_at = excluded.loaded_at"),
            {"v": policy.version, "p": policy.reason_prefix, "caps": json.dumps(policy.caps),
             "doc": json.dumps(dict(policy.document), default=str)})
        c.execute(text("DELETE FROM attribution.drain_conditions WHERE policy_version = :v"), {"v": policy.version})
        insert_conditions(c, policy)


def insert_conditions(conn: Connection, policy: DrainPolicy) -> None:
    """The policy's conditions as rows of drain_conditions (what drain_conditions_at evaluates)."""
    conn.execute(text(
        "INSERT INTO attribution.drain_conditions (policy_version, condition_id, kinds, per, distinct_by, "
        "culprit_distinct, min_count, window_days, label, score, recurrence) VALUES "
        "(:v, :id, :kinds, :per, :distinct, :culprit, :min_count, :window_days, :label, :score, :recurrence)"),
        [{"v": policy.version, "id": k.id, "kinds": list(k.kinds) or None, "per": k.per,
          "distinct": k.distinct, "culprit": k.culprit_distinct, "min_count": k.min_count,
          "window_days": k.window_days, "label": k.label, "score": k.score, "recurrence": k.recurrence}
         for k in policy.conditions])


def candidates(engine: Engine, cluster: str | None = None) -> list[Candidate]:
    with engine.connect() as c:
        rows = c.execute(text(
            "SELECT cluster, node, reason, evidence, score FROM attribution.drain_candidates "
            "WHERE CAST(:c AS text) IS NULL OR cluster = :c ORDER BY score DESC, cluster, node"), {"c": cluster}).all()
    return [Candidate(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]


def applied_since(engine: Engine, cluster: str, since: datetime) -> int:
    with engine.connect() as c:
        return int(c.execute(text(
            "SELECT count(*) FROM attribution.drain_actions WHERE cluster = :c AND decision = 'applied' "
            "AND at >= :s"), {"c": cluster, "s": since}).scalar())


def audit(engine: Engine, cluster: str, rows: Iterable[tuple[Decision, str, str]], policy_version: str | None,
          actor: str | None) -> None:
    """Record decisions: (decision, final word (applied/skipped/capped/failed), detail)."""
    rows = list(rows)
    if not rows:
        return
    with engine.begin() as c:
        c.execute(text(
            "INSERT INTO attribution.drain_actions (cluster, node, decision, reason, detail, evidence, "
            "policy_version, actor) VALUES (:c, :n, :d, :r, :det, CAST(:ev AS jsonb), :pv, :a)"),
            [{"c": cluster, "n": d.candidate.node, "d": word, "r": d.candidate.reason, "det": detail,
              "ev": json.dumps(d.candidate.evidence, default=str), "pv": policy_version, "a": actor}
             for d, word, detail in rows])


@contextlib.contextmanager
def apply_lock(engine: Engine, cluster: str) -> Iterator[None]:
    """One `drain apply` per cluster at a time (issue 18, M4): a session advisory lock held on its own connection
    while the plan is read, decided against the caps and applied, so a second run sees the first one's audit."""
    with engine.connect() as c:
        key = {"k": f"attribution.drain_apply/{cluster}"}
        with c.begin():  # wait for the run before (a timer, a human) to end; SET LOCAL: the pooled connection
            c.execute(text("SET LOCAL statement_timeout = '600s'"))  # keeps its configured timeouts
            c.execute(text("SET LOCAL lock_timeout = '600s'"))
            c.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), key)  # a session lock: kept
        try:
            yield
        finally:
            c.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), key)
            c.commit()


def record_drain(engine: Engine, cluster: str, d: Decision, policy_version: str | None, actor: str | None) -> int:
    """The audit row of a drain about to be made, written before the scontrol call (so it counts against the
    hourly cap even if this process dies during the call). Returns its id for `drain_outcome`."""
    with engine.begin() as c:
        return int(c.execute(text(
            "INSERT INTO attribution.drain_actions (cluster, node, decision, reason, detail, evidence, "
            "policy_version, actor) VALUES (:c, :n, 'applied', :r, 'policy met', CAST(:ev AS jsonb), :pv, :a) "
            "RETURNING id"),
            {"c": cluster, "n": d.candidate.node, "r": d.candidate.reason,
             "ev": json.dumps(d.candidate.evidence, default=str), "pv": policy_version, "a": actor}).scalar_one())


def drain_outcome(engine: Engine, action_id: int, word: str, detail: str) -> None:
    """The scontrol call failed: the audit row says so (and stops counting against the hourly cap)."""
    with engine.begin() as c:
        c.execute(text("UPDATE attribution.drain_actions SET decision = :w, detail = :d WHERE id = :id"),
                  {"w": word, "d": detail, "id": action_id})


def record_resume(engine: Engine, cluster: str, node: str, actor: str | None, detail: str,
                  at: datetime | None = None) -> int:
    """The node's evidence up to now stops counting for the one-shot conditions (a resume in its life,
    node_life). Returns how many events were marked handled."""
    from attribution.store.node_life import LifeChange, record_changes

    at = at or datetime.now(UTC)
    with engine.begin() as c:
        c.execute(text(
            "INSERT INTO attribution.node_resumes (cluster, node, resumed_at) VALUES (:c, :n, :t) "
            "ON CONFLICT (cluster, node) DO UPDATE SET resumed_at = excluded.resumed_at"),
            {"c": cluster, "n": node, "t": at})
        record_changes(c, cluster, [LifeChange(node, at, "resume", "attribution", actor, detail)])
        n = c.execute(text(
            "UPDATE attribution.events SET handled_at = :t WHERE node_key = :n AND cluster = :c AND node = :n "
            "AND handled_at IS NULL "
            "AND occurred_at <= :t AND occurred_at >= :lo"),
            {"c": cluster, "n": node, "t": at, "lo": at - timedelta(days=366)}).rowcount
        c.execute(text(
            "INSERT INTO attribution.drain_actions (cluster, node, decision, detail, actor) "
            "VALUES (:c, :n, 'resumed', :d, :a)"), {"c": cluster, "n": node, "d": detail, "a": actor})
    return int(n or 0)


def actions(engine: Engine, cluster: str | None = None, limit: int = 50) -> list[dict]:
    with engine.connect() as c:
        rows = c.execute(text(
            "SELECT at, cluster, node, decision, reason, detail FROM attribution.drain_actions "
            "WHERE CAST(:c AS text) IS NULL OR cluster = :c ORDER BY id DESC LIMIT :n"),
            {"c": cluster, "n": limit}).mappings().all()
    return [dict(r) for r in rows]


#: The conditions of the policy in force (the newest loaded), with what each counts.
POLICY_CONDITIONS = """
SELECT c.condition_id, c.recurrence, c.min_count, c.window_days,
       CASE WHEN c.culprit_distinct = 'users' THEN 'users' WHEN c.culprit_distinct IS NOT NULL THEN 'failed jobs'
            ELSE c.distinct_by END AS unit
FROM attribution.drain_conditions c
WHERE c.policy_version = (SELECT version FROM attribution.drain_policies ORDER BY loaded_at DESC, version LIMIT 1)
ORDER BY c.condition_id"""
NODE_PROGRESS = """
SELECT condition_id, gpu, counted, seen, weeks, reset_at, reset_what, reset_source
FROM attribution.drain_conditions_at(:t, NULL, :c, :n)"""


def node_progress(conn: Connection, cluster: str, node: str, at: datetime) -> list[ConditionProgress]:
    """Each condition of the policy in force and how far the node's evidence goes towards it at `at`, nearest
    first (drain.explain); empty when no policy was loaded yet."""
    conditions = [dict(r) for r in conn.execute(text(POLICY_CONDITIONS)).mappings()]
    if not conditions:
        return []
    rows = [dict(r) for r in conn.execute(text(NODE_PROGRESS), {"t": at, "c": cluster, "n": node}).mappings()]
    return progress(conditions, rows)
