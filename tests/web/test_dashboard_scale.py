"""The dashboard's pages on a large store: 100,000 jobs and 1,000,000 events (bench/history.py's generated fleet
year, 10,000 nodes). Every page must be served by an index that stops at the page size, so its cost does not
grow with the history: checked on the query plans (rows actually read), which do not depend on the machine's
speed. The seconds each page took are written to tests/artifacts/dashboard-scale.json (docs/dashboard.md)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

httpx = pytest.importorskip("httpx")

from sqlalchemy import create_engine, text

from attribution.store import browse

from tests.harness.chromium import artifacts_dir
from tests.harness.service import start_service

pytestmark = pytest.mark.slow

JOBS, EVENTS = 100_000, 1_000_000


@pytest.fixture(scope="module")
def big_store(pg_server, pg_template, ruleset):
    from bench.history import fill

    from attribution.drain.policy import load_policy
    from attribution.store import drain as sd

    name = f"test_big_{uuid.uuid4().hex[:10]}"
    url = pg_server.create_database(name, template=pg_template)
    engine = create_engine(url)
    try:
        # bench/history's fleet with 10 events per job (100,000 jobs), 10,000 hardware causes (one job in ten fails
        # on hardware: a dashboard's fleet, not the benchmark's stress rate of one event in 20) and 20,000 context
        fill(engine, 0, EVENTS, events_per_job=EVENTS // JOBS, cause_every=EVENTS // 10_000,
             context_every=EVENTS // 20_000)
        sd.load_policy(engine, load_policy(ruleset))
        yield url, engine
    finally:
        engine.dispose()
        pg_server.drop_database(name)


def _plan_rows(conn, sql: str, params: dict, relation: str = "jobs") -> int:
    """Rows the plan's scans of a table (attribution.jobs; for `events`, its partitions too) actually read
    (EXPLAIN ANALYZE), summed over loops."""
    plan = conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql), params).scalar()[0]["Plan"]
    total, stack = 0, [plan]
    while stack:
        node = stack.pop()
        name = node.get("Relation Name") or ""
        if name == relation or (relation != "jobs" and name.startswith(relation + "_")):
            total += int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1)) + \
                int(node.get("Rows Removed by Filter", 0))
        stack.extend(node.get("Plans", []))
    return total


def test_the_store_holds_what_the_test_claims(big_store):
    _, engine = big_store
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs")).scalar() == JOBS
        assert c.execute(text("SELECT count(*) FROM attribution.events")).scalar() == EVENTS


@pytest.mark.parametrize("where", [
    browse.JobFilter(),
    browse.JobFilter(outcome="failed"),
    browse.JobFilter(cluster="fleet", outcome="gpu_hardware"),
    browse.JobFilter(user="user7"),
    browse.JobFilter(node="n00007"),
], ids=["all", "failed", "cluster+outcome", "user", "node"])
def test_a_page_of_the_job_list_reads_a_bounded_number_of_jobs(big_store, where, monkeypatch):
    _, engine = big_store
    captured = {}
    real = browse.text

    def spy(sql):
        captured["sql"] = sql
        return real(sql)

    monkeypatch.setattr(browse, "text", spy)
    with engine.connect() as c:
        rows, nxt = browse.list_jobs(c, where, limit=50)
        monkeypatch.setattr(browse, "text", real)
        params = {"lim": 51, "cluster": where.cluster, "outcome": where.outcome, "node": where.node,
                  "user": where.user}
        read = _plan_rows(c, captured["sql"], {k: v for k, v in params.items() if f":{k}" in captured["sql"]})
    assert rows, "the generated history has jobs for every filter tested"
    # a full scan would read 100,000; the rarest filter (gpu_hardware) needs a few hundred newest jobs for 50
    assert read <= 2_000, read


def test_the_node_pages_telemetry_reads_that_nodes_rows_only(big_store):
    """The node page's counter events walk the events index on (cluster, node, occurred_at) and its device
    counters the device_counters index: what one node did, not the million events of the fleet."""
    from datetime import datetime, timedelta, timezone

    _, engine = big_store
    with engine.connect() as c:
        lemon = c.execute(text("SELECT node FROM attribution.events GROUP BY node ORDER BY count(*) DESC "
                               "LIMIT 1")).scalar()
        own = c.execute(text("SELECT count(*) FROM attribution.events WHERE node = :n"), {"n": lemon}).scalar()
        since = datetime.now(timezone.utc) - timedelta(days=91)
        p = {"cluster": "fleet", "node": lemon, "since": since, "lim": 201, "source": browse.TELEMETRY_SOURCE}
        read = _plan_rows(c, browse.NODE_COUNTER_EVENTS, p, "events")
        devices = _plan_rows(c, browse.NODE_PORT_COUNTERS, p, "device_counters")
        doc = browse.node_telemetry(c, "fleet", lemon, since)
    print(f"\nnode {lemon}: {own} events, counter-events query read {read}")
    assert 0 < own < 2_000 and 0 < read <= own, (read, own)  # a full scan would read 1,000,000
    assert devices == 0 and doc["counter_events"] == []  # the generated history has no counters


def test_every_page_answers_and_the_times_are_recorded(big_store, tmp_path):
    url, engine = big_store
    with engine.connect() as c:
        job = c.execute(text("SELECT cluster, job_id FROM attribution.job_verdicts WHERE outcome = 'gpu_hardware' "
                             "ORDER BY job_end DESC LIMIT 1")).one()
        lemon = c.execute(text("SELECT node FROM attribution.recurring_faults ORDER BY events DESC LIMIT 1")).scalar()
    svc = start_service(url, tmp_path / "svc")
    try:
        with httpx.Client(base_url=svc.url, timeout=120) as client:
            assert client.post("/ui/login", data={"token": svc.tokens["read"]}).status_code == 303
            pages = {"job list": "/ui/jobs", "job list, one node": f"/ui/jobs?node={lemon}",
                     "job list, gpu_hardware": "/ui/jobs?outcome=gpu_hardware",
                     "job": f"/ui/jobs/{job.cluster}/{job.job_id}", "node": f"/ui/nodes/fleet/{lemon}",
                     "drain candidates": "/ui/drain", "fleet": "/ui/fleet",
                     "GET /v1/jobs": "/v1/jobs?outcome=failed"}
            seconds = {}
            for name, path in pages.items():
                headers = svc.auth("read") if path.startswith("/v1/") else {}
                client.get(path, headers=headers)  # warm the worker's caches once, as a running service has
                t0 = time.perf_counter()
                r = client.get(path, headers=headers)
                seconds[name] = round(time.perf_counter() - t0, 3)
                assert r.status_code == 200, (name, r.text[:300])
    finally:
        svc.stop()
    (artifacts_dir() / "dashboard-scale.json").write_text(json.dumps(
        {"jobs": JOBS, "events": EVENTS, "seconds": seconds}, indent=2) + "\n")
