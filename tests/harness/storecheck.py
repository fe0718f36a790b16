"""What a store holds, by natural keys (no ids, no wall-clock stamps), and the invariants any crash must keep.

Used by the crash-consistency and database-trouble tests to compare a store with one clean ingest of the same input.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import text

JOB_KEY = "j.cluster, j.job_id, j.start_time"
#: A link's role in its job's current verdict (over je, v), as docs/store.md "Roles of a job's events" says it.
ROLE_IN_JOB = ("CASE WHEN je.event_id = v.root_event_id THEN 'root_cause' "
               "WHEN je.event_id = ANY (v.cause_event_ids) THEN 'cause' "
               "WHEN je.event_id = ANY (v.symptom_event_ids) THEN 'symptom' ELSE 'unattributed' END")
QUERIES = {
    "jobs": f"SELECT {JOB_KEY}, j.end_time, j.state, j.exit_code, j.nodes, j.context::text, j.context_source "
            "FROM attribution.jobs j",
    "events": "SELECT encode(fingerprint, 'hex'), occurred_at, cluster, node, source, kind, role, code, gpu, rank, "
              "time_exact, rule, location, message, line, fields::text FROM attribution.events",
    # each link with its event's role in the job's current verdict (docs/store.md "Roles of a job's events")
    "job_events": f"SELECT {JOB_KEY}, encode(e.fingerprint, 'hex'), e.occurred_at, {ROLE_IN_JOB} "
                  "FROM attribution.job_events je JOIN attribution.jobs j ON j.id = je.job_ref "
                  "LEFT JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id "
                  "JOIN attribution.events e ON e.id = je.event_id AND e.occurred_at = je.event_time",
    "verdicts": f"SELECT {JOB_KEY}, v.outcome, v.confidence, v.action, v.root_kind, v.root_code, v.root_node, "
                "v.root_gpu, v.culprit_nodes, v.input_digest, v.id = j.current_verdict_id "
                "FROM attribution.verdicts v JOIN attribution.jobs j ON j.id = v.job_ref",
    "verdict_symptoms": f"SELECT {JOB_KEY}, encode(e.fingerprint, 'hex'), vs.explained_by "
                        "FROM attribution.verdicts v "
                        "CROSS JOIN unnest(v.symptom_event_ids, v.symptom_explained_by) AS vs(event_id, explained_by) "
                        "JOIN attribution.jobs j ON j.id = v.job_ref JOIN attribution.events e ON e.id = vs.event_id",
    "coverage": f"SELECT {JOB_KEY}, c.source, c.node_key, c.file_key, c.status, c.lines, c.reason, c.notes "
                "FROM attribution.coverage c JOIN attribution.jobs j ON j.id = c.job_ref",
}
#: Rollup tables (whichever the schema has): (key columns, count columns). A crash may leave a count lower than
#: the clean ingest's (that job is not stored yet), never higher (counted twice).
ROLLUPS = {
    "fault_weeks": (("cluster", "node", "gpu_key", "kind", "code_key", "week"), ("events",)),
    "fault_series": (("cluster", "node", "gpu_key", "kind", "code_key"), ("events", "weeks")),
    "failed_roots": (("cluster", "node", "gpu_key", "kind", "code_key", "week"), ("jobs",)),
    "failed_root_series": (("cluster", "node", "gpu_key", "kind", "code_key"), ("jobs",)),
}
JOB_SCOPED = ("job_events", "verdicts", "verdict_symptoms", "coverage")

# Invariants that must hold after any crash (each query returns the offending rows).
INVARIANTS = {
    "job without a current verdict (half-stored job)":
        "SELECT id FROM attribution.jobs WHERE current_verdict_id IS NULL",
    "current verdict missing or of another job":
        "SELECT j.id FROM attribution.jobs j LEFT JOIN attribution.verdicts v "
        "ON v.id = j.current_verdict_id AND v.job_ref = j.id WHERE j.current_verdict_id IS NOT NULL AND v.id IS NULL",
    "verdict without its job":
        "SELECT v.id FROM attribution.verdicts v LEFT JOIN attribution.jobs j ON j.id = v.job_ref WHERE j.id IS NULL",
    "symptom or cause of a missing event":
        "SELECT v.id FROM attribution.verdicts v "
        "CROSS JOIN unnest(v.symptom_event_ids || coalesce(v.cause_event_ids, '{}')) AS r(event_id) "
        "LEFT JOIN attribution.events e ON e.id = r.event_id WHERE e.id IS NULL",
    "link to a missing job or event":
        "SELECT je.job_ref FROM attribution.job_events je LEFT JOIN attribution.jobs j ON j.id = je.job_ref "
        "LEFT JOIN attribution.events e ON e.id = je.event_id AND e.occurred_at = je.event_time "
        "WHERE j.id IS NULL OR e.id IS NULL",
    "weekly rollup counts more events than are stored (counted twice)": """
        SELECT f.* FROM attribution.fault_weeks f WHERE f.events > (
          SELECT count(*) FROM attribution.events e WHERE e.cluster = f.cluster AND coalesce(e.node, '') = f.node
            AND coalesce(e.gpu, '') = f.gpu_key AND e.kind = f.kind AND coalesce(e.code, -1) = f.code_key
            AND (date_trunc('week', e.occurred_at AT TIME ZONE 'UTC'))::date = f.week)""",
}


def _norm(v):
    return tuple(v) if isinstance(v, list) else v


def snapshot(engine) -> dict[str, Counter]:
    with engine.connect() as c:
        out = {name: Counter(tuple(_norm(x) for x in row) for row in c.execute(text(q)))
               for name, q in QUERIES.items()}
        for table, (keys, counts) in ROLLUPS.items():
            if c.execute(text("SELECT to_regclass(:t)"), {"t": f"attribution.{table}"}).scalar() is None:
                continue
            rows = c.execute(text(f"SELECT {', '.join(keys + counts)} FROM attribution.{table}")).all()
            out[table] = Counter(tuple(r) for r in rows)
        return out


def _rollup_at_most(snap: Counter, ref: Counter, nkeys: int) -> list:
    have = {r[:nkeys]: r[nkeys:] for r in ref}
    return [r for r in snap if r[:nkeys] not in have or any(a > b for a, b in zip(r[nkeys:], have[r[:nkeys]]))]


def check_consistent(engine, reference: dict[str, Counter]) -> dict[str, int]:
    """After a crash: every invariant holds, every stored job is exactly as in the clean ingest, nothing is stored
    twice, nothing is stored that the clean ingest does not store. Returns how much is stored."""
    with engine.connect() as c:
        for what, q in INVARIANTS.items():
            bad = c.execute(text(q)).all()
            assert bad == [], f"{what}: {bad[:5]}"
    snap = snapshot(engine)
    jobs = {row[:3] for row in snap["jobs"]}
    assert all(n == 1 for n in snap["events"].values()), "an event stored twice"
    assert not snap["events"] - reference["events"], "an event the clean ingest does not store"
    assert not snap["jobs"] - reference["jobs"]
    for name in JOB_SCOPED:
        mine = Counter({k: n for k, n in reference[name].items() if k[:3] in jobs})
        assert snap[name] == mine, f"{name} of the stored jobs differ from the clean ingest"
    for table, (keys, _) in ROLLUPS.items():
        if table in reference:
            assert _rollup_at_most(snap[table], reference[table], len(keys)) == [], f"{table} counted twice"
    return {"jobs": len(jobs), "events": sum(snap["events"].values())}
