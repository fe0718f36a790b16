"""api.settle: a job is attributed at most once per settle interval while its reports arrive, the reports in
between are stored and the job left pending, and one attribution follows (the interval's end, the next report
after it, or `attribution db attribute-pending`). The verdict's `Attribution-Pending` header says which."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from attribution.api.settle import Settle
from attribution.cli import main
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.reports.render import verdict_to_dict

from tests.conftest import INCIDENTS
from tests.harness.documents import documents
from tests.harness.service import start_service

BUNDLE = INCIDENTS / "01-xid79-fallen-off-bus"


def test_the_first_report_attributes_and_the_next_ones_wait_for_the_interval():
    s = Settle(10.0)
    assert s.may_attribute("j", now=100.0)
    s.attributed("j", now=100.0)
    assert not s.may_attribute("j", now=105.0)
    assert s.delay("j", now=105.0) == pytest.approx(5.0)
    assert s.delay("j", now=106.0) is None  # one deferred attribution per job, whatever arrives meanwhile
    s.done("j")
    assert s.may_attribute("j", now=110.0) and s.may_attribute("other", now=105.0)
    assert Settle(0).may_attribute("j", now=1.0)  # 0: every report attributes


def _verdict(http, svc, cluster, job_id):
    r = http.get(f"/v1/jobs/{cluster}/{job_id}/verdict", headers=svc.auth("read"))
    assert r.status_code == 200, r.text
    return r.json(), r.headers["attribution-pending"]


def test_reports_within_the_interval_are_stored_pending_and_attribute_pending_settles_them(ruleset, pg_url,
                                                                                           tmp_path):
    """An interval of an hour: the first report of the job attributes it at once, the others are stored (their
    answer has no outcome) and the job stays pending until `attribution db attribute-pending` attributes it
    from everything stored: the verdict the bundle gets whole."""
    docs = documents(ruleset, BUNDLE)
    ctl = docs[-1]
    cluster, job_id = ctl["context"]["cluster"], ctl["context"]["job_id"]
    svc = start_service(pg_url, tmp_path / "svc", service={"settle_seconds": 3600})
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as http:
            first = http.post("/v1/observations", json=ctl, headers=svc.auth("report"))
            assert first.status_code == 200 and first.json()["outcome"] is not None, first.text
            before, pending = _verdict(http, svc, cluster, job_id)
            assert pending == "false"
            for doc in docs[:-1]:
                r = http.post("/v1/observations", json=doc, headers=svc.auth("report"))
                assert r.status_code == 200 and r.json()["outcome"] is None, r.text
            held, pending = _verdict(http, svc, cluster, job_id)
            assert pending == "true" and held == before  # stored, not attributed yet
            r = CliRunner().invoke(main, ["db", "attribute-pending"], env={"ATTRIBUTION_DATABASE_URL": pg_url})
            assert r.exit_code == 0, r.output
            after, pending = _verdict(http, svc, cluster, job_id)
    finally:
        svc.stop()
    whole = verdict_to_dict(diagnose_bundle(ruleset, BUNDLE).verdict)
    key = ("outcome", "confidence", "action", "culprits", "root_cause")
    assert pending == "false"
    assert {k: after[k] for k in key} == {k: whole[k] for k in key}
    assert {k: before[k] for k in key} != {k: whole[k] for k in key}  # the nodes' evidence changed the verdict
