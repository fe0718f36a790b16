"""attribution.reports.fleet (with store/reports and pages/fleet_*): `attribution report fleet` over a store filled
like `attribution demo`, opened in a real headless Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from sqlalchemy import text

from attribution.fleetgen import BUS_NODE, ECC_GPU, ECC_NODE, NVLINK_GPU, NVLINK_NODE
from attribution.store.reports import fleet_data, week_range

from tests.harness.chromium import artifacts_dir, browser  # noqa: F401  (fixture)
from tests.harness.demo_store import DEMO_WEEKS, demo_store  # noqa: F401  (fixture)

UTC = timezone.utc

PAGE_FACTS = """(() => {
  const text = (s) => (document.querySelector(s) || {textContent: ''}).textContent.trim();
  const nodes = (s) => Array.from(document.querySelectorAll(s + ' tr[data-node]')).map((r) => r.dataset.node);
  const drawn = (id) => document.querySelectorAll('#' + id + ' svg [aria-roledescription]').length;
  return {
    failed: text('#stat-failed .value'), jobs: text('#stat-jobs .value'), hours: text('#stat-gpu-hours .value'),
    recurringNodes: nodes('#recurring-nodes'), recurringGpus: nodes('#recurring-gpus'),
    drain: nodes('#drain-candidates'),
    charts: {failed: drawn('chart-failed-jobs'), faults: drawn('chart-fault-events'),
             hours: drawn('chart-gpu-hours')},
    sparklines: document.querySelectorAll('.spark svg').length,
    gpuCells: Array.from(document.querySelectorAll('#recurring-gpus td.mono')).map((td) => td.textContent),
  };
})()"""


@pytest.mark.browser
def test_fleet_report_renders_from_the_demo_data(demo_store, browser, tmp_path, request):  # noqa: F811
    env = dict(os.environ, ATTRIBUTION_DATABASE_URL=demo_store.url)
    env.pop("ATTRIBUTION_CONFIG", None)
    out = tmp_path / "fleet"
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "report", "fleet", "--weeks", str(DEMO_WEEKS),
                        "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    page_file = out / "index.html"
    assert r.stdout.strip() == str(page_file)
    page = browser.new_page()
    seconds = page.open(page_file)
    shot = page.screenshot(artifacts_dir() / "fleet-report.png")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"fleet report screenshot: {shot}")
    assert page.problems() == []
    assert seconds < 15
    facts = page.evaluate(PAGE_FACTS)
    assert int(facts["failed"].replace(",", "")) > 0 and int(facts["jobs"].replace(",", "")) > 0
    assert all(n > 0 for n in facts["charts"].values()), facts["charts"]
    # the lemons of fleetgen: the NVLink node recurs in five weeks, the ECC node in three
    assert facts["recurringNodes"][:2] == [NVLINK_NODE, ECC_NODE]
    assert {NVLINK_GPU, ECC_GPU} <= set(facts["gpuCells"])
    assert facts["sparklines"] == len(facts["recurringNodes"]) + len(facts["recurringGpus"])
    if _drain_policy_loaded(demo_store.engine):
        assert BUS_NODE in facts["drain"], "the GPU that fell off the bus this week is to be drained"


def _drain_policy_loaded(engine) -> bool:
    with engine.connect() as c:
        return bool(c.execute(text("SELECT to_regclass('attribution.drain_policies') IS NOT NULL")).scalar()) and \
            bool(c.execute(text("SELECT count(*) FROM attribution.drain_policies")).scalar())


def test_failed_gpu_hours_are_duration_times_nodes_times_gpus(demo_store):  # noqa: F811
    data = fleet_data(demo_store.engine, weeks=DEMO_WEEKS, until=demo_store.end)
    with demo_store.engine.connect() as c:
        jobs = c.execute(text(
            "SELECT start_time, end_time, cardinality(nodes), gpus_per_node, v.outcome FROM attribution.jobs j "
            "JOIN attribution.verdicts v ON v.id = j.current_verdict_id "
            "WHERE end_time >= :s AND end_time < :u"), {"s": data.since, "u": data.until}).all()
    failed = [j for j in jobs if j[4] != "none"]
    want = sum((e - s).total_seconds() / 3600 * n * (g or 0) for s, e, n, g, _ in failed)
    assert data.totals["failed"] == len(failed) > 0
    assert data.totals["failed_gpu_hours"] == pytest.approx(want)
    assert sum(r["gpu_hours"] for r in data.failed_gpu_hours) == pytest.approx(want)
    assert sum(r["jobs"] for r in data.failed_jobs_weekly) == len(failed)
    assert {r["week"] for r in data.failed_jobs_weekly} <= set(data.weeks)


def test_weeks_are_iso_weeks_ending_with_the_current_one():
    since, until = week_range(8, datetime(2026, 11, 26, 18, 0, tzinfo=UTC))  # a Thursday
    assert since == datetime(2026, 10, 5, tzinfo=UTC) and since.weekday() == 0
    assert until == datetime(2026, 11, 30, tzinfo=UTC)
    with pytest.raises(ValueError):
        week_range(0)


def test_recurring_rows_count_the_weeks_of_the_report_only(demo_store):  # noqa: F811
    """The NVLink node's fault recurs in five ISO weeks; a four-week report leaves at least one of them out, and
    its row counts what the four weeks hold, like its sparkline (the fault's first event is older)."""
    from attribution.reports.fleet_charts import weekly_counts

    data = fleet_data(demo_store.engine, weeks=4, until=demo_store.end)
    row = next(r for r in data.recurring_nodes if r["node"] == NVLINK_NODE)
    p = {"n": NVLINK_NODE, "s": data.since, "u": data.until}
    with demo_store.engine.connect() as c:
        ever = c.execute(text("SELECT sum(events), min(first_seen) FROM attribution.recurring_faults "
                              "WHERE node = :n"), p).one()
        events, weeks = c.execute(text(
            "SELECT count(*), count(DISTINCT date_trunc('week', occurred_at AT TIME ZONE 'UTC')) "
            "FROM attribution.fault_events WHERE node = :n AND role <> 'symptom' AND occurred_at >= :s "
            "AND occurred_at < :u"), p).one()
        failed = c.execute(text(
            "SELECT count(*) FROM attribution.job_verdicts WHERE root_node = :n AND outcome <> 'none' "
            "AND coalesce(job_end, job_start) >= :s AND coalesce(job_end, job_start) < :u"), p).scalar()
    assert (row["events"], row["weeks"], row["jobs_failed"]) == (events, weeks, failed)
    assert row["events"] < ever[0] and row["first_seen"] == ever[1] < data.since
    spark = weekly_counts(data, False)[(row["cluster"], NVLINK_NODE)]
    assert sum(spark.values()) == row["events"] and sum(1 for n in spark.values() if n) == row["weeks"]
