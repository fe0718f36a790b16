"""The dashboard in a real headless Chromium (Debian's package) against the real service on the demo data: an
on-call engineer signs in, finds a failed job in the list, reads its root cause and culprit, follows the culprit
to its node page and sees the node's recurring faults. No page logs a console error or reaches off the machine;
screenshots go to tests/artifacts/dashboard-*.png."""

from __future__ import annotations

import pytest

pytest.importorskip("websocket")

from sqlalchemy import text

from tests.harness.chromium import artifacts_dir, browser  # noqa: F401  (fixture)
from tests.harness.demo_store import demo_store, ingest_counter_cases  # noqa: F401  (fixture)
from tests.harness.service import start_service

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def service(demo_store, tmp_path_factory, ruleset):  # noqa: F811
    ingest_counter_cases(demo_store.engine, ruleset)
    svc = start_service(demo_store.url, tmp_path_factory.mktemp("dashboard-browser"))
    try:
        yield svc
    finally:
        svc.stop()


def test_from_the_job_list_to_the_culprit_node_in_a_real_browser(browser, service, demo_store):  # noqa: F811
    with demo_store.engine.connect() as c:
        job = c.execute(text(
            "SELECT v.cluster, v.job_id, v.root_kind, v.root_node FROM attribution.job_verdicts v "
            "JOIN attribution.recurring_faults r ON r.cluster = v.cluster AND r.node = v.root_node "
            "WHERE v.outcome = 'gpu_hardware' ORDER BY v.job_end DESC, v.job_id LIMIT 1")).one()
    page = browser.new_page()
    page.allowed = (service.url + "/",)
    out = artifacts_dir()

    page.goto(service.url + f"/ui/jobs?cluster={job.cluster}&outcome=gpu_hardware")
    assert page.evaluate("location.pathname") == "/ui/login"  # no session yet: the login form, then back
    page.fill("#token", service.tokens["read"])
    page.click("#sign-in")
    assert page.evaluate("location.pathname + location.search") == \
        f"/ui/jobs?cluster={job.cluster}&outcome=gpu_hardware"
    page.screenshot(out / "dashboard-jobs.png")

    page.click(f'tr[data-job="{job.cluster}/{job.job_id}"] td a')
    assert page.evaluate("document.getElementById('outcome').textContent") == "gpu_hardware"
    root = page.evaluate("document.getElementById('root-cause').textContent")
    assert job.root_kind in root and job.root_node in root
    page.wait_for("(function () { var f = document.querySelector('iframe.timeline'); var d = f && "
                  "f.contentDocument; return d && d.body && d.body.getAttribute('data-ready'); })()")
    assert page.evaluate("document.querySelector('iframe.timeline').contentDocument.body"
                         ".getAttribute('data-ready')") == "1"  # the timeline's charts drew
    page.screenshot(out / "dashboard-job.png")
    job_url = page.evaluate("location.href")

    page.click(f'#culprits a[href="/ui/nodes/{job.cluster}/{job.root_node}"]')
    assert page.evaluate("document.querySelector('h1').textContent").startswith(f"Node {job.root_node}")
    recurring = page.evaluate("document.getElementById('recurring').textContent")
    assert "weeks" in recurring and page.evaluate("document.querySelectorAll('#recurring tbody tr').length") >= 1
    page.screenshot(out / "dashboard-node.png")

    page.goto(job_url)  # a deep link survives a reload
    assert page.evaluate("document.getElementById('outcome').textContent") == "gpu_hardware"
    page.goto(service.url + "/ui/fleet")
    page.goto(service.url + "/ui/drain")
    page.screenshot(out / "dashboard-drain.png")
    assert page.problems() == []


def test_counter_evidence_from_the_job_to_the_node_telemetry_in_a_real_browser(browser, service):  # noqa: F811
    """A job failed with only NCCL errors in its output; its GPU counters are the evidence. The job page shows
    the counter deltas, the culprit node's page its GPUs' latest counters and the counter events over time, and
    the newest event leads to the job in which the GPU vanished."""
    page = browser.new_page()
    page.allowed = (service.url + "/",)
    out = artifacts_dir()
    page.goto(service.url + "/ui/jobs/ash/5530917")
    if page.evaluate("location.pathname") == "/ui/login":  # this browser's session, when this test runs alone
        page.fill("#token", service.tokens["read"])
        page.click("#sign-in")
    assert page.evaluate("location.pathname") == "/ui/jobs/ash/5530917"
    assert page.evaluate("document.getElementById('outcome').textContent") == "gpu_hardware"
    deltas = page.evaluate("Array.from(document.querySelectorAll('#counter-evidence tbody tr'))"
                           ".map(function (r) { var c = r.querySelectorAll('td.mono'); "
                           "return c[c.length - 2].textContent + ' ' + c[c.length - 1].textContent; }).sort()")
    assert deltas == ["ecc.aggregate.dram_uncorrectable 0 -> 2", "ecc.volatile.dram_uncorrectable 0 -> 2",
                      "remapped_rows.uncorrectable 0 -> 1"]
    page.screenshot(out / "dashboard-job-counters.png")

    page.click('#culprits a[href="/ui/nodes/ash/ash-h100-02"]')
    page.goto(service.url + "/ui/nodes/ash/ash-h100-02?days=3660")  # the cases are of October 2026
    assert page.evaluate("document.querySelectorAll('#gpu-counters tbody tr').length") == 8
    assert page.evaluate("document.querySelector('#gpu-counters tr[data-gpu=\"0000:61:00\"] td.bad')"
                         ".textContent") == "2"
    kinds = page.evaluate("Array.from(document.querySelectorAll('#counter-events tbody tr'))"
                          ".map(function (r) { return r.getAttribute('data-kind'); })")
    assert kinds == ["gpu_vanished", "gpu_ecc_counter", "gpu_ecc_counter"]
    page.screenshot(out / "dashboard-node-counters.png")

    page.click('#counter-events tr[data-kind="gpu_vanished"] a')
    assert page.evaluate("location.pathname") == "/ui/jobs/ash/5531204"
    assert "gpu_vanished" in page.evaluate("document.getElementById('root-cause').textContent")
    assert page.problems() == []
