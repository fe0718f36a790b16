"""The writer on a real PostgreSQL: which report's context wins, when two reports are one job, events stored once
and linked once, and the fleet rollups counting only node faults."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from attribution.model import INFRASTRUCTURE_OUTCOMES, Event, ExecutionContext
from attribution.store.events import INFRA_SQL
from attribution.store.writer import JobSession

UTC = timezone.utc
START = datetime(2026, 3, 10, 9, 0, tzinfo=UTC)


def _ctx(**kw) -> ExecutionContext:
    base = dict(cluster="c1", job_id="4242", nodes=("n1", "n2"), start=START, end=START + timedelta(hours=1))
    return ExecutionContext(**{**base, **kw})


def _ev(**kw) -> Event:
    base = dict(kind="gpu_fallen_off_bus", role="cause", rule="kernel.xid", source="kernel", location="kern:7",
                line="NVRM: Xid (PCI:0000:9d:00): 79, GPU has fallen off the bus.", message="GPU has fallen off",
                node="n1", gpu="0000:9d:00", code=79, time=START + timedelta(minutes=30), outcome="gpu_hardware",
                action="drain_node", severity="critical")
    return Event(**{**base, **kw})


def _job_row(store, job_id="4242"):
    with store.connect() as c:
        return c.execute(text("SELECT count(*), min(state), min(context_source) FROM attribution.jobs "
                              "WHERE job_id = :j"), {"j": job_id}).one()


def test_the_controllers_context_wins_over_a_node_reports_whatever_arrives_first(store):
    with store.begin() as c:
        JobSession(c, _ctx(state="FAILED", failed_node="n1"), "controller")
    with store.begin() as c:
        JobSession(c, _ctx(state="COMPLETING"), "node")
    assert tuple(_job_row(store)) == (1, "FAILED", "controller")
    with store.begin() as c:
        JobSession(c, _ctx(state="FAILED", exit_code="3:0"), "bundle")  # as high: the newer word wins
    with store.begin() as c:
        assert c.execute(text("SELECT exit_code, context_source FROM attribution.jobs")).one() == ("3:0", "bundle")


def test_reports_of_one_id_a_day_apart_are_one_job_and_two_days_apart_two(store):
    with store.begin() as c:
        a = JobSession(c, _ctx(), "node").job
    with store.begin() as c:
        b = JobSession(c, _ctx(start=START + timedelta(hours=20)), "node").job
    with store.begin() as c:
        d = JobSession(c, _ctx(start=START + timedelta(days=2)), "node").job
    assert a.id == b.id != d.id
    assert _job_row(store)[0] == 2


def test_an_event_is_stored_once_and_linked_once_per_job(store):
    ev = _ev()
    with store.begin() as c:
        assert JobSession(c, _ctx(), "node").add_events([ev, ev]) == (1, 1)
    with store.begin() as c:
        assert JobSession(c, _ctx(), "node").add_events([ev]) == (0, 0)
    with store.begin() as c:  # another job on the node saw the same kernel line
        assert JobSession(c, _ctx(job_id="4243"), "node").add_events([ev]) == (0, 1)
    with store.begin() as c:
        s = JobSession(c, _ctx(), "node")
        assert s.events() == [ev]


def test_two_jobs_stored_in_one_transaction_each_link_only_their_own_events(store):
    """The batch table is emptied after each batch: a second job's session in the same transaction stores and
    links its own event, and of a job new in this transaction its events are the ones in hand (JobEvents.fresh)."""
    a, b = _ev(), _ev(node="n2", location="kern:9", message="GPU has fallen off n2")
    with store.begin() as c:
        first = JobSession(c, _ctx(), "node")
        assert first.add_events([a]) == (1, 1)
        second = JobSession(c, _ctx(job_id="4243"), "node")
        assert second.add_events([b]) == (1, 1)
        events, ids = second.stored_events()
        assert second.fresh() is not None and events == [b] and len(ids) == 1
    with store.connect() as c:
        links = sorted(c.execute(text("SELECT je.job_id, e.node FROM attribution.job_events je "
                                      "JOIN attribution.events e ON e.id = je.event_id")).all())
    assert links == [("4242", "n1"), ("4243", "n2")]


def test_a_job_stored_before_is_read_back_not_taken_from_the_events_in_hand(store):
    """A second piece of a job (not created in its transaction) is not fresh: its events come from the store, the
    first piece's included."""
    a, b = _ev(), _ev(node="n2", location="kern:9", message="GPU has fallen off n2")
    with store.begin() as c:
        JobSession(c, _ctx(), "node").add_events([a])
    with store.begin() as c:
        s = JobSession(c, _ctx(), "node")
        s.add_events([b])
        assert s.fresh() is None
        assert sorted(e.node for e in s.stored_events()[0]) == ["n1", "n2"]


def test_only_node_faults_and_infrastructure_causes_reach_the_fleet_rollups(store):
    evs = [
        _ev(),
        _ev(kind="xid_45_cleanup", role="symptom", code=45, outcome=None, location="kern:8", line="Xid 45"),
        _ev(kind="cuda_oom", role="cause", source="job", rule="job.cuda_oom", outcome="application",
            location="out:1", line="CUDA out of memory", gpu=None, code=None),
        _ev(kind="nvlink_error", role="cause", source="job", rule="job.x", outcome="nvlink", location="out:2",
            line="NVLink error", gpu=None, code=None),
    ]
    with store.begin() as c:
        JobSession(c, _ctx(), "node").add_events(evs)
    with store.connect() as c:
        kinds = sorted(r[0] for r in c.execute(text("SELECT kind FROM attribution.fault_series")))
    assert kinds == ["gpu_fallen_off_bus", "nvlink_error"]


def test_the_sql_list_of_infrastructure_outcomes_is_the_models():
    assert set(INFRA_SQL.strip("()").replace("'", "").split(", ")) == INFRASTRUCTURE_OUTCOMES
