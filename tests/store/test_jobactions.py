"""The audit of what was done to jobs (store/jobactions.py, migration 0026) on the test PostgreSQL: a cause of a job
requeued once however many processes decide at once, the caps counted from it, a skip recorded once, the comment
of a run, the recently failed jobs a requeue plan reads."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from sqlalchemy import create_engine, text

from attribution.act.requeue import Counts, RequeueDecision
from attribution.pipeline.ingest import ingest_bundle
from attribution.store import jobactions as sj

from tests.conftest import INCIDENTS

UTC = timezone.utc
NOW = datetime.now(UTC).replace(microsecond=0)


def _requeue(counts: Counts) -> RequeueDecision:
    if counts.same_cause_at is not None:
        return RequeueDecision("skipped", "already requeued for this cause", "k@n1", ("n1",))
    return RequeueDecision("requeue", "policy met", "k@n1", ("n1",), "n1")


def test_eight_processes_deciding_at_once_requeue_a_cause_of_a_job_once(store, pg_url):
    engines = [create_engine(pg_url) for _ in range(8)]
    got, start = [], threading.Barrier(8)

    def one(engine):
        start.wait()
        got.append(sj.decide_and_record(engine, "c", "77", NOW, "alice", "k@n1", _requeue, "pv", "t", NOW))

    threads = [threading.Thread(target=one, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for e in engines:
        e.dispose()
    applied = [d for d, action_id in got if action_id is not None]
    assert len(got) == 8 and len(applied) == 1 and applied[0].decision == "requeue"
    with store.connect() as c:
        rows = c.execute(text("SELECT decision, cause, nodes FROM attribution.job_actions WHERE job_id = '77' "
                              "ORDER BY id")).all()
        counts = sj.counts(c, "c", "77", "alice", "k@n1", NOW)
    # one requeue and one skip row: the seven later deciders said the same thing, recorded once
    assert [tuple(r) for r in rows] == [("applied", "k@n1", ["n1"]), ("skipped", "k@n1", ["n1"])]
    assert (counts.job, counts.user_last_hour, counts.cluster_last_hour) == (1, 1, 1)
    assert counts.same_cause_at is not None


def test_a_failed_requeue_stops_counting(store):
    d, action_id = sj.decide_and_record(store, "c", "78", NOW, "bob", "k@n1", _requeue, "pv", "t", NOW)
    sj.outcome(store, "78", action_id, "failed", "scontrol requeuehold: Invalid job id specified")
    with store.connect() as c:
        assert sj.counts(c, "c", "78", "bob", "k@n1", NOW) == Counts(0, 0, 0, None)
    d, action_id = sj.decide_and_record(store, "c", "78", NOW, "bob", "k@n1", _requeue, "pv", "t", NOW)
    assert d.decision == "requeue" and action_id is not None


def test_a_dry_run_records_nothing(store):
    d, action_id = sj.decide_and_record(store, "c", "79", NOW, "bob", "k@n1", _requeue, "pv", "t", NOW,
                                        dry_run=True)
    assert d.decision == "requeue" and action_id is None
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.job_actions WHERE job_id = '79'")).scalar() == 0


def test_the_hour_caps_count_the_last_hour_only(store):
    with store.begin() as c:
        for i, ago in enumerate((5, 30, 70)):
            sj.record(c, "c", f"8{i}", NOW, "requeue", "applied", "policy met", "carol", f"k@n{i}", ["n1"])
            c.execute(text("UPDATE attribution.job_actions SET at = :t WHERE job_id = :j"),
                      {"t": NOW - timedelta(minutes=ago), "j": f"8{i}"})
        counts = sj.counts(c, "c", "80", "carol", "other@n9", NOW)
    assert (counts.job, counts.user_last_hour, counts.cluster_last_hour, counts.same_cause_at) == (1, 2, 2, None)


def test_the_comment_of_a_run_is_the_last_one_written_for_it(store):
    later = NOW + timedelta(minutes=4)  # the requeued run of the same job id
    with store.begin() as c:
        sj.record(c, "c", "90", NOW, "admin_comment", "applied", "attribution: unknown, ...")
        sj.record(c, "c", "90", NOW, "admin_comment", "applied", "attribution: gpu_hardware, ...")
        sj.record(c, "c", "90", NOW, "admin_comment", "failed", "sacctmgr modify: ...")
        assert sj.last_comment(c, "c", "90", NOW) == "attribution: gpu_hardware, ..."
        assert sj.last_comment(c, "c", "90", later) is None
        assert [a["action"] for a in sj.job_actions(c, "c", "90")] == ["admin_comment"] * 3


def test_recent_failures_are_the_infrastructure_verdicts_with_culprits(ruleset, store):
    for case in ("01-xid79-fallen-off-bus", "07-app-python-keyerror", "11-watchdog-timeout-only"):
        ingest_bundle(ruleset, store, INCIDENTS / case)
    since = datetime(2026, 1, 1, tzinfo=UTC)
    rows = sj.recent_failures(store, since, ("gpu_hardware", "host"))
    assert [(r[0], r[1], r[3]["outcome"]) for r in rows] == [("helios", "731842", "gpu_hardware")]
    assert sj.recent_failures(store, datetime(2026, 3, 10, 9, 30, tzinfo=UTC), ("gpu_hardware",)) == []
