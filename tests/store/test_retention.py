"""store/retention: a month of events is dropped with its links while jobs still link to it (no foreign key stops
it), the other months, the rollups and the verdicts stay: a month of the default partition (the example incidents'
months, older than the partitions made ahead) and a month partition (this month's, made ahead)."""

from __future__ import annotations

from datetime import date, datetime, timezone

from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.fleetgen import history, write_bundle
from attribution.pipeline import ingest_bundle

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
