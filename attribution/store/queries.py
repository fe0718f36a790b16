"""Reading the public views: the fleet questions the CLI, the API and the reports ask."""

from __future__ import annotations

from sqlalchemy import Engine, text


def outcomes(engine: Engine) -> list[tuple[str, int]]:
    with engine.connect() as c:
        return [tuple(r) for r in c.execute(text(
            "SELECT coalesce(outcome, '(none yet)'), count(*) FROM attribution.job_verdicts "
            "GROUP BY 1 ORDER BY 2 DESC, 1"))]


def recurring_faults(engine: Engine, limit: int = 20) -> list[dict]:
    with engine.connect() as c:
        rows = c.execute(text(
            "SELECT cluster, node, gpu, kind, code, weeks, events, jobs_failed, first_seen, last_seen "
            "FROM attribution.recurring_faults ORDER BY weeks DESC, events DESC, cluster, node, kind LIMIT :n"),
            {"n": limit}).mappings().all()
        return [dict(r) for r in rows]


def culprit_nodes(engine: Engine, limit: int = 10) -> list[tuple[str, str, int]]:
    with engine.connect() as c:
        return [tuple(r) for r in c.execute(text(
            "SELECT cluster, n, count(*) FROM attribution.job_verdicts, unnest(culprit_nodes) AS n "
            "GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT :n"), {"n": limit})]
