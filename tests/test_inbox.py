"""The central drain of the node inbox (attribution/inbox.py, `attribution db drain-inbox`): reports submitted the
way a node hook submits them (node/inbox_client.py over node/pgwire.py, through attribution.submit_report) are
decoded with the service's codec, stored by the normal ingest, attributed once per job, and deleted in the
ingest's transaction: exactly once, across a crash before the commit and beside another drain.

The reports are incident 01's pieces as its nodes and its controller would send them; the expected verdict is the
incident's ground truth (tests/incidents/01-xid79-fallen-off-bus/expected.yaml: gpu_hardware, hx-gpu019)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from attribution.api.intake import parse_report
from attribution.inbox import drain_inbox
from attribution.node import pgwire
from attribution.node.epilog import payload
from attribution.node.inbox_client import Inbox
from attribution.pipeline import diagnose_bundle
from attribution.store import inbox as store_inbox
from attribution.store.writer import JobSession

from tests.conftest import INCIDENTS

INCIDENT = INCIDENTS / "01-xid79-fallen-off-bus"
NODES = ("hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020")


def decode(doc, origin):
    return parse_report(doc, origin)


def reports(ruleset) -> list[dict]:
    """Four node reports (their kernel and Fabric Manager events and coverage) and the controller's (the job's
    output), as the hooks make their payloads."""
    d = diagnose_bundle(ruleset, INCIDENT)
    out = [payload(d.context, [e for e in d.events if e.node == n and e.source != "job"],
                   [c for c in d.coverage if c.node == n], "node") for n in NODES]
    out.append(payload(d.context, [e for e in d.events if e.source == "job"],
                       [c for c in d.coverage if c.source == "job"], "controller"))
    return out


def submitter(pg_url: str):
    u = make_url(pg_url)
    target = pgwire.parse_url(f"postgresql://{u.username}@127.0.0.1:{u.port}/{u.database}?sslmode=disable")
    settings = SimpleNamespace(database=SimpleNamespace(statement_timeout_ms=5000, connect_timeout=5))
    return Inbox(target, settings, time.monotonic() + 30)


def _count(store, sql: str, **params) -> int:
    with store.connect() as c:
        return c.execute(text(sql), params).scalar()


def _verdict(store):
    with store.connect() as c:
        return c.execute(text("SELECT outcome, culprit_nodes FROM attribution.job_verdicts")).all()


def test_a_jobs_reports_are_stored_once_attributed_once_and_gone_from_the_inbox(ruleset, store, pg_url):
    docs = reports(ruleset)
    with submitter(pg_url) as inbox:
        assert [inbox.submit(d) for d in docs] == [True] * 5
    assert _count(store, "SELECT count(*) FROM attribution.inbox_reports") == 5
    res = drain_inbox(ruleset, store, decode)
    assert (res.stored, res.jobs, res.attributed, res.refused, res.error, res.left) == (5, 1, 1, [], None, 0)
    assert _count(store, "SELECT count(*) FROM attribution.inbox_reports") == 0
    assert _verdict(store) == [("gpu_hardware", ["hx-gpu019"])]
    # one verdict computed for the five reports (coalesced), not one each
    assert _count(store, "SELECT count(*) FROM attribution.verdicts") == 1
    assert _count(store, "SELECT count(*) FROM attribution.coverage") == 9
    again = drain_inbox(ruleset, store, decode)
    assert (again.stored, again.jobs) == (0, 0)


def test_the_drain_stores_what_a_direct_ingest_of_the_same_reports_stores(ruleset, store, pg_url):
    """The same rows in the store whichever way the reports came (the ingest is the same, the codec the
    service's)."""
    from attribution.api.intake import ingest_report

    docs = reports(ruleset)
    with submitter(pg_url) as inbox:
        for d in docs:
            inbox.submit(d)
    drain_inbox(ruleset, store, decode)
    snap = _snapshot(store)
    for d in docs:  # the same reports ingested again directly: nothing new
        result, _ = ingest_report(ruleset, store, parse_report(d))
        assert result.new_events == 0
    assert _snapshot(store) == snap


def _snapshot(store):
    with store.connect() as c:
        return (c.execute(text("SELECT count(*) FROM attribution.events")).scalar(),
                c.execute(text("SELECT count(*) FROM attribution.job_events")).scalar(),
                c.execute(text("SELECT outcome FROM attribution.job_verdicts")).all())


def test_a_crash_between_storing_and_the_commit_leaves_the_row_and_nothing_stored(ruleset, store, pg_url,
                                                                                   monkeypatch):
    docs = reports(ruleset)
    with submitter(pg_url) as inbox:
        inbox.submit(docs[2])  # hx-gpu019's report: the Xid 79
    real = JobSession.mark_pending

    def crash(self):  # after the events, links and coverage were written, before the commit
        raise RuntimeError("killed")

    monkeypatch.setattr(JobSession, "mark_pending", crash)
    with pytest.raises(RuntimeError, match="killed"):
        drain_inbox(ruleset, store, decode)
    assert _count(store, "SELECT count(*) FROM attribution.inbox_reports") == 1
    assert _count(store, "SELECT count(*) FROM attribution.events") == 0
    assert _count(store, "SELECT count(*) FROM attribution.jobs") == 0
    monkeypatch.setattr(JobSession, "mark_pending", real)
    res = drain_inbox(ruleset, store, decode)
    assert (res.stored, res.attributed) == (1, 1)
    assert _count(store, "SELECT count(*) FROM attribution.inbox_reports") == 0
    assert _count(store, "SELECT count(*) FROM attribution.events WHERE node = 'hx-gpu019'") == 4


def test_a_row_another_drain_holds_is_not_stored_twice(ruleset, store, pg_url):
    """One drain has deleted a row in its open transaction; a second drain at it waits for that commit, then
    finds it gone and stores nothing."""
    docs = reports(ruleset)
    with submitter(pg_url) as inbox:
        inbox.submit(docs[2])
    [row] = _queued(store)
    with store.connect() as other:
        tx = other.begin()
        assert store_inbox.take(other, row.job_id, row.digest)
        out = []
        t = threading.Thread(target=lambda: out.append(drain_inbox(ruleset, store, decode)))
        t.start()
        time.sleep(0.5)
        assert t.is_alive()  # waiting on the row's lock
        tx.commit()
        t.join(30)
    [res] = out
    assert (res.stored, res.taken, res.jobs) == (0, 1, 0)
    assert _count(store, "SELECT count(*) FROM attribution.events") == 0


def _queued(store):
    with store.connect() as c:
        return store_inbox.queued(c, 10)


def test_a_report_the_codec_refuses_is_set_aside_with_the_reason_and_the_rest_goes_on(ruleset, store, pg_url):
    docs = reports(ruleset)
    bad = dict(docs[0], events=[{"kind": "x"}])  # an event without its rule, line, ...
    with submitter(pg_url) as inbox:
        inbox.submit(bad)
        inbox.submit(docs[2])
    res = drain_inbox(ruleset, store, decode)
    assert (res.stored, len(res.refused)) == (1, 1)
    assert "events[0]" in res.refused[0] and "from " in res.refused[0]
    with store.connect() as c:
        waiting, aside = store_inbox.counts(c)
        reason = c.execute(text("SELECT refused FROM attribution.inbox_reports")).scalar()
    assert (waiting, aside) == (0, 1) and "events[0]" in reason
    assert drain_inbox(ruleset, store, decode).refused == []  # set aside once, not read again


def test_the_limit_bounds_a_drain_and_the_rest_waits(ruleset, store, pg_url):
    docs = reports(ruleset)
    with submitter(pg_url) as inbox:
        for d in docs:
            inbox.submit(d)
    first = drain_inbox(ruleset, store, decode, limit=2)
    assert (first.stored, first.left) == (2, 3)
    second = drain_inbox(ruleset, store, decode)
    assert (second.stored, second.left) == (3, 0)
    assert _verdict(store) == [("gpu_hardware", ["hx-gpu019"])]


def test_a_report_the_database_refuses_is_set_aside_and_its_jobs_other_reports_are_stored(ruleset, store, pg_url,
                                                                                           monkeypatch):
    """A job's reports go in one transaction; when the database refuses one of them for its content (a data
    exception: StoreError permanent), the others are stored one by one and only that one is set aside."""
    import attribution.pipeline as pipeline
    from attribution.errors import StoreError

    docs = reports(ruleset)
    with submitter(pg_url) as inbox:
        for d in docs:
            inbox.submit(d)
    real = pipeline.store_piece

    def refusing(conn, ctx, inside, outside, coverage, *args, **kwargs):
        if any(c.node == "hx-gpu018" for c in coverage):
            raise StoreError("value too long for an index row", permanent=True)
        return real(conn, ctx, inside, outside, coverage, *args, **kwargs)

    monkeypatch.setattr(pipeline, "store_piece", refusing)
    res = drain_inbox(ruleset, store, decode)
    assert (res.stored, res.jobs, res.attributed, res.error) == (4, 1, 1, None)
    assert len(res.refused) == 1 and "value too long" in res.refused[0]
    with store.connect() as c:
        assert store_inbox.counts(c) == (0, 1)
        assert c.execute(text("SELECT count(*) FROM attribution.coverage WHERE node_key = 'hx-gpu018'")).scalar() == 0
    assert _verdict(store) == [("gpu_hardware", ["hx-gpu019"])]
