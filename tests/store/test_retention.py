"""store/retention: a month of events is dropped with its links while jobs still link to it (no foreign key stops
it), the other months, the rollups and the verdicts stay: a month of the default partition (the example incidents'
months, older than the partitions made ahead) and a month partition (this month's, made ahead)."""

from __future__ import annotations

import json

from datetime import datetime, timezone

from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.fleetgen import history, write_bundle
from attribution.pipeline.ingest import ingest_bundle

from tests.conftest import INCIDENTS, bundles


def _counts(engine):
    with engine.connect() as c:
        return c.execute(text(
            "SELECT (SELECT count(*) FROM attribution.events), (SELECT count(*) FROM attribution.job_events), "
            "(SELECT count(*) FROM attribution.event_jobs), (SELECT count(*) FROM attribution.verdicts), "
            "(SELECT coalesce(sum(events), 0) FROM attribution.fault_weeks)")).one()


def test_dropping_a_month_removes_its_events_and_links_only(ruleset, store, tmp_path):
    for b in bundles(INCIDENTS):
        ingest_bundle(ruleset, store, b)
    with store.connect() as c:
        month, n_links = c.execute(text(
            "SELECT date_trunc('month', event_time AT TIME ZONE 'UTC')::date, count(*) FROM attribution.job_events "
            "GROUP BY 1 ORDER BY 2 DESC LIMIT 1")).one()
        n_events = c.execute(text("SELECT count(*) FROM attribution.events WHERE occurred_at >= :m "
                                  "AND occurred_at < :m + interval '1 month'"), {"m": month}).scalar()
        assert n_events and n_links
    before = _counts(store)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {store.url.render_as_string(hide_password=False)}\n")
    r = CliRunner().invoke(main, ["--config", str(cfg), "db", "drop-events-month", month.strftime("%Y-%m")])
    assert r.exit_code == 0, r.output
    assert f"dropped {n_events} event(s), {n_links} job link(s)" in r.output
    after = _counts(store)
    assert after[0] == before[0] - n_events and after[1] == before[1] - n_links and after[2] == before[2] - n_links
    assert after[3:] == before[3:]  # verdicts and the rollups keep the history
    with store.connect() as c:
        assert c.execute(text("SELECT to_regclass(:p)"), {"p": f"attribution.events_p{month:%Y%m}"}).scalar() is None
        left = c.execute(text("SELECT count(*) FROM attribution.job_events WHERE event_time >= :m "
                              "AND event_time < :m + interval '1 month'"), {"m": month}).scalar()
    assert left == 0
    again = CliRunner().invoke(main, ["--config", str(cfg), "db", "drop-events-month", month.strftime("%Y-%m")])
    assert again.exit_code == 0 and "dropped 0 event(s), 0 job link(s)" in again.output


def test_a_month_partition_is_detached_and_dropped(ruleset, store, tmp_path):
    """A month with its own partition (made by the owner before its rows came): detached and dropped; the
    default partition keeps the other months' rows."""
    with store.begin() as c:
        c.execute(text("SELECT attribution.ensure_event_partition(CAST('2026-06-15 00:00+00' AS timestamptz))"))
    for j in history(weeks=6, end=datetime(2026, 6, 28, tzinfo=timezone.utc), jobs_per_week=3):
        ingest_bundle(ruleset, store, write_bundle(j, tmp_path))
    with store.connect() as c:
        n_events = c.execute(text("SELECT count(*) FROM attribution.events_p202606")).scalar()
        n_links = c.execute(text("SELECT count(*) FROM attribution.job_events WHERE event_time >= '2026-06-01' "
                                 "AND event_time < '2026-07-01'")).scalar()
        in_default = c.execute(text("SELECT count(*) FROM attribution.events_default")).scalar()
    assert n_events and n_links and in_default  # May's rows are in the default partition
    before = _counts(store)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {store.url.render_as_string(hide_password=False)}\n")
    r = CliRunner().invoke(main, ["--config", str(cfg), "db", "drop-events-month", "2026-06"])
    assert r.exit_code == 0, r.output
    assert f"dropped {n_events} event(s), {n_links} job link(s)" in r.output
    after = _counts(store)
    assert after[0] == before[0] - n_events and after[1] == before[1] - n_links
    with store.connect() as c:
        assert c.execute(text("SELECT to_regclass('attribution.events_p202606')")).scalar() is None
        assert c.execute(text("SELECT count(*) FROM attribution.events_default")).scalar() == in_default


def test_a_bad_month_is_refused_in_one_line(tmp_path, store):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {store.url.render_as_string(hide_password=False)}\n")
    r = CliRunner().invoke(main, ["--config", str(cfg), "db", "drop-events-month", "2025-13"])
    assert r.exit_code == 2 and "2025-13: not a month (expected YYYY-MM)" in r.output


# -- db prune --older-than -----------------------------------------------------------------------------------------


def _month_partitions(engine, months=range(1, 7)):
    """Partitions for 2026's first months, made before any row comes (the incidents fall in them)."""
    with engine.begin() as c:
        for m in months:
            c.execute(text("SELECT attribution.ensure_event_partition(CAST(:t AS timestamptz))"),
                      {"t": f"2026-{m:02d}-15 00:00+00"})


def _table_counts(engine):
    tables = ("events", "job_events", "event_jobs", "jobs", "verdicts", "coverage", "job_evidence")
    with engine.connect() as c:
        return {t: c.execute(text(f"SELECT count(*) FROM attribution.{t}")).scalar() for t in tables}


def test_prune_removes_exactly_what_is_older_than_the_cutoff_and_keeps_the_history(ruleset, store, tmp_path):
    """The incidents span months; the cutoff is the end of the median job: every job that ended before it goes
    with its verdicts, coverage, links and kept evidence, every event before it goes (whole months as
    partitions), and everything after stays, as do the rollups. A second run removes nothing."""
    _month_partitions(store)
    for b in bundles(INCIDENTS):
        ingest_bundle(ruleset, store, b)
    with store.connect() as c:
        ends = c.execute(text("SELECT end_time FROM attribution.jobs ORDER BY end_time")).scalars().all()
        cutoff = ends[len(ends) // 2]
        expect_jobs = sum(1 for e in ends if e < cutoff)
        expect_events = c.execute(text("SELECT count(*) FROM attribution.events WHERE occurred_at < :c"),
                                  {"c": cutoff}).scalar()
        expect_months = c.execute(text(
            "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid "
            "WHERE i.inhparent = 'attribution.events'::regclass AND p.relname ~ '^events_p[0-9]{6}$' "
            "AND to_date(substr(p.relname, 9), 'YYYYMM') + interval '1 month' <= :c"), {"c": cutoff}).scalar()
        kept_events = c.execute(text("SELECT count(*) FROM attribution.events WHERE occurred_at >= :c"),
                                {"c": cutoff}).scalar()
        rollups = c.execute(text("SELECT coalesce(sum(events), 0) FROM attribution.fault_weeks")).scalar()
    assert 0 < expect_jobs < len(ends) and expect_events and kept_events and expect_months
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {store.url.render_as_string(hide_password=False)}\n")
    r = CliRunner().invoke(main, ["--config", str(cfg), "db", "prune", "--older-than", cutoff.isoformat(),
                                  "--batch", "7", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["jobs"] == expect_jobs and out["events"] == expect_events
    assert len(out["months"]) == expect_months and out["months_left"] == []
    after = _table_counts(store)
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs WHERE end_time < :c"),
                         {"c": cutoff}).scalar() == 0
        assert after["events"] == kept_events
        for t in ("job_events", "event_jobs"):
            assert c.execute(text(f"SELECT count(*) FROM attribution.{t} WHERE event_time < :c"),
                             {"c": cutoff}).scalar() == 0
        # nothing dangles: every verdict, coverage row and kept evidence belongs to a kept job
        for t in ("verdicts", "coverage", "job_evidence"):
            assert c.execute(text(f"SELECT count(*) FROM attribution.{t} x WHERE NOT EXISTS "
                                  "(SELECT 1 FROM attribution.jobs j WHERE j.id = x.job_ref)")).scalar() == 0
        assert after["verdicts"] >= len(ends) - expect_jobs
        assert c.execute(text("SELECT coalesce(sum(events), 0) FROM attribution.fault_weeks")).scalar() == rollups
    again = CliRunner().invoke(main, ["--config", str(cfg), "db", "prune", "--older-than", cutoff.isoformat(),
                                      "--json"])
    assert again.exit_code == 0, again.output
    assert {k: v for k, v in json.loads(again.output).items() if k != "cutoff"} == {
        "months": [], "months_left": [], "events": 0, "job_links": 0, "event_links": 0, "jobs": 0, "alert_keys": 0,
        "alert_deliveries": 0}
    assert _table_counts(store) == after


def test_a_month_whose_detach_cannot_get_its_lock_is_left_for_the_next_run(ruleset, store):
    """An ingest holding events (here a transaction that read it) makes the detach wait: with a short lock
    timeout prune gives up on that month instead of queueing every other ingest behind its lock."""
    from datetime import datetime, timezone

    from attribution.store.retention import prune

    _month_partitions(store, range(3, 7))  # the first incident's month (2026-03) on
    for b in bundles(INCIDENTS):
        ingest_bundle(ruleset, store, b)
    with store.connect() as c:
        first = c.execute(text("SELECT min(occurred_at) FROM attribution.events")).scalar()
    month_end = datetime(first.year + (first.month == 12), first.month % 12 + 1, 1, tzinfo=timezone.utc)
    holder = store.connect()
    tx = holder.begin()
    holder.execute(text("SELECT count(*) FROM attribution.events"))  # ACCESS SHARE on events and its partitions
    try:
        res = prune(store, month_end, lock_timeout_ms=100, tries=1)
    finally:
        tx.rollback()
        holder.close()
    assert res.months == [] and res.months_left == [f"{first:%Y-%m}"]
    res = prune(store, month_end, lock_timeout_ms=100, tries=1)
    assert res.months == [f"{first:%Y-%m}"] and res.months_left == []


def test_prune_refuses_a_bad_age_in_one_line(tmp_path, store):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {store.url.render_as_string(hide_password=False)}\n")
    for bad, why in (("180x", "not a time"), ("now+1d", "the cutoff is in the future")):
        r = CliRunner().invoke(main, ["--config", str(cfg), "db", "prune", "--older-than", bad])
        assert r.exit_code == 2 and why in r.output and len(r.output.strip().splitlines()) == 1, r.output
