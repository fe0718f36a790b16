"""The inbox's table and its one way in (migration 0018, store/inbox.py): `attribution.submit_report(report)` keeps
a payload once per canonical digest, with its job id and who submitted it, and refuses what is not a report with
a SQLSTATE the node's spool can act on (class 22: set aside, never retried)."""

from __future__ import annotations

import hashlib
import json

import pytest
from psycopg import errors
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from attribution.store import inbox as store_inbox

DOC = {"type": "ingest", "source": "node", "context": {"cluster": "c1", "job_id": "4242", "nodes": ["n1"],
                                                        "start": "2026-03-10T08:00:00Z"},
       "events": [], "coverage": [{"source": "kernel", "node": "n1", "status": "ok", "lines": 3}]}


def _submit(store, report: str):
    with store.begin() as c:
        return c.execute(text("SELECT attribution.submit_report(:r)"), {"r": report}).scalar()


def test_a_payload_is_one_row_however_often_and_however_it_is_spelled(store):
    compact = json.dumps(DOC, separators=(",", ":"))
    spaced = json.dumps(dict(reversed(list(DOC.items()))), indent=2)  # another key order, other white space
    assert [_submit(store, compact), _submit(store, compact), _submit(store, spaced)] == [True, False, False]
    with store.connect() as c:
        [row] = store_inbox.queued(c, 10)
        canonical = c.execute(text("SELECT payload::text FROM attribution.inbox_reports")).scalar()
        user = c.execute(text("SELECT session_user")).scalar()
    assert (row.job_id, row.payload, row.submitted_by) == ("4242", DOC, user)
    assert row.digest == hashlib.sha256(canonical.encode()).digest()
    assert _submit(store, json.dumps(dict(DOC, source="controller"))) is True  # another payload: another row


@pytest.mark.parametrize("report, sqlstate", [
    ("not json", "22P02"),
    ("[1, 2]", "22023"),
    (json.dumps({"context": {"cluster": "c1"}}), "22023"),
    (json.dumps({"context": "4242"}), "22023"),
    (json.dumps(dict(DOC, events=["\\u0000"])).replace("\\\\u0000", "\\u0000"), "22P05"),
])
def test_what_is_not_a_report_is_refused_with_a_data_exception(store, report, sqlstate):
    with pytest.raises(DBAPIError) as e:
        _submit(store, report)
    assert e.value.orig.sqlstate == sqlstate
    assert isinstance(e.value.orig, errors.DataError)  # class 22: the spool sets such a payload aside
    with store.connect() as c:
        assert store_inbox.counts(c) == (0, 0)


def test_the_function_runs_as_its_owner_with_a_fixed_search_path_and_not_for_public(store):
    with store.connect() as c:
        secdef, config, public = c.execute(text(
            "SELECT prosecdef, proconfig, has_function_privilege('public', p.oid, 'EXECUTE') "
            "FROM pg_proc p WHERE p.oid = 'attribution.submit_report(text)'::regprocedure")).first()
    assert secdef and config == ["search_path=pg_catalog, pg_temp"] and not public
