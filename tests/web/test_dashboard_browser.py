"""The dashboard in a real headless Chromium (Debian's package) against the real service on the demo data: an
on-call engineer signs in, finds a failed job in the list, reads its root cause and culprit, follows the culprit
to its node page and sees the node's recurring faults; the timeline fits its content and the window, every page
sets its text in one font family, the fleet page has the dashboard's navigation and links, and colours each kind
and outcome as every other chart does. No page logs a console error or reaches off the machine; screenshots go to
tests/artifacts/dashboard-*.png."""

from __future__ import annotations

from urllib.parse import quote

import pytest

pytest.importorskip("websocket")
httpx = pytest.importorskip("httpx")

from sqlalchemy import text

from attribution.reports.shell import FONT, MONO

from tests.harness.chromium import artifacts_dir, browser  # noqa: F401  (fixture)
from tests.harness.demo_store import demo_store, ingest_counter_cases  # noqa: F401  (fixture)
from tests.harness.service import start_service

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: Every font family a page uses: its text's (in CSS, as computed) and its charts' (SVG text).
FONTS = """(() => {
  const found = new Set();
  document.querySelectorAll('body, body *').forEach((e) => {
    if (e.closest('svg') && e.tagName.toLowerCase() !== 'text') { return; }
    if (e.tagName === 'SCRIPT' || e.tagName === 'STYLE') { return; }
    found.add(getComputedStyle(e).fontFamily);
  });
  return Array.from(found).sort();
})()"""
#: How the timeline chart sits in its element: widths of the element and the chart, and whether it scrolls.
TIMELINE_FIT = """(() => {
  const el = document.getElementById('timeline'), svg = el.querySelector('svg');
  const box = svg.getBoundingClientRect();
  return {room: el.clientWidth, chart: box.width, scrolls: el.scrollWidth > el.clientWidth,
          height: box.height, element: el.getBoundingClientRect().height,
          fixedFrames: document.querySelectorAll('iframe').length};
})()"""
#: Each chart's legends as label -> colour of its symbol.
LEGENDS = """(() => {
  const out = {};
  document.querySelectorAll('.chart[id]').forEach((chart) => {
    const colours = {};
    chart.querySelectorAll('g.role-legend').forEach((legend) => {
      const labels = legend.querySelectorAll('g.role-legend-label text');
      legend.querySelectorAll('g.role-legend-symbol path').forEach((symbol, i) => {
        if (labels[i]) { colours[labels[i].textContent] = symbol.getAttribute('fill'); }
      });
    });
    out[chart.id] = colours;
  });
  return out;
})()"""
READY = "document.body.getAttribute('data-ready') === '1'"


def _one_font(page) -> None:
    fonts = page.evaluate(FONTS)
    assert set(fonts) <= {FONT, MONO} and FONT in fonts, fonts


def _fits(page, width: int) -> dict:
    fit = page.evaluate(TIMELINE_FIT)
    assert fit["fixedFrames"] == 0
    assert not fit["scrolls"] and fit["room"] - 40 <= fit["chart"] <= fit["room"], (width, fit)
    assert abs(fit["element"] - fit["height"]) < 20, fit  # as tall as its content: no blank space, nothing cut off
    return fit


def _sign_in(page, service) -> None:
    if page.evaluate("location.pathname") == "/ui/login":  # this browser's session, when a test runs alone
        page.fill("#token", service.tokens["read"])
        page.click("#sign-in")


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

    _one_font(page)

    page.click(f'tr[data-job="{job.cluster}/{job.job_id}"] td a')
    assert page.evaluate("document.getElementById('outcome').textContent") == "gpu_hardware"
    assert page.evaluate("document.querySelectorAll('#verdict, #outcome, #root-cause').length") == 3  # once
    root = page.evaluate("document.getElementById('root-cause').textContent")
    assert job.root_kind in root and job.root_node in root
    owner = page.evaluate("document.getElementById('owner-line').innerText")  # what its owner's sacct would say
    assert owner.startswith("attribution: gpu_hardware, ") and f" on {job.root_node} " in owner
    assert "ended more than 30 minutes ago" in page.evaluate("document.getElementById('requeue-plan').innerText")
    page.wait_for(READY)  # the timeline drew, in the page itself
    assert not page.evaluate("Array.from(document.querySelectorAll('p')).some("
                             "(p) => p.offsetParent !== null && p.textContent.includes('needs JavaScript'))")
    wide = _fits(page, 1400)
    _one_font(page)
    page.screenshot(out / "dashboard-job.png")
    job_url = page.evaluate("location.href")
    page.goto(job_url, width=1000)  # a narrower window: the chart is drawn narrower, not cut off
    page.wait_for(READY)
    narrow = _fits(page, 1000)
    assert narrow["chart"] < wide["chart"] - 200
    page.screenshot(out / "dashboard-job-narrow.png", width=1000)
    page.send("Emulation.setDeviceMetricsOverride", {"width": 1600, "height": 1000, "deviceScaleFactor": 1,
                                                     "mobile": False})  # the window grows: the chart follows
    page.wait_for(f"document.getElementById('timeline').querySelector('svg').getBoundingClientRect().width > "
                  f"{narrow['chart'] + 200} && {READY}")
    _fits(page, 1600)

    page.click(f'#culprits a[href="/ui/nodes/{job.cluster}/{job.root_node}"]')
    assert page.evaluate("document.querySelector('h1').textContent").startswith(f"Node {job.root_node}")
    recurring = page.evaluate("document.getElementById('recurring').textContent")
    assert "weeks" in recurring and page.evaluate("document.querySelectorAll('#recurring tbody tr').length") >= 1
    assert page.evaluate("document.querySelectorAll('#faults-weekly tr.quiet').length") >= 1
    _one_font(page)
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
    _sign_in(page, service)
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


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def test_the_fleet_page_has_the_dashboard_frame_links_its_names_and_one_colour_per_kind(browser, service):  # noqa: F811
    page = browser.new_page()
    page.allowed = (service.url + "/",)
    page.goto(service.url + "/ui/fleet")
    _sign_in(page, service)
    page.wait_for(READY)
    assert page.evaluate("Array.from(document.querySelectorAll('nav.top a')).map((a) => a.getAttribute('href'))") \
        == ["/ui/jobs", "/ui/fleet", "/ui/drain"]
    _one_font(page)
    legends = page.evaluate(LEGENDS)
    faults, hours = legends["chart-fault-events"], legends["chart-gpu-hours"]
    shared = set(faults) & set(hours)
    assert len(shared) >= 3 and all(faults[k] == hours[k] for k in shared), (faults, hours)
    assert len(set(faults.values())) == len(faults)  # kinds side by side look apart
    outcomes = legends["chart-failed-jobs"]
    page.screenshot(out := artifacts_dir() / "dashboard-fleet.png")
    # light: the page itself is small, the chart library came once and the next chart page takes it from the cache
    size = page.evaluate("performance.getEntriesByType('navigation')[0].decodedBodySize")
    library = page.evaluate("performance.getEntriesByType('resource').filter((r) => r.name.includes('/ui/assets/'))"
                            ".map((r) => r.name)")
    assert size < 100_000 and len(library) == 1, (size, library)

    node = page.evaluate("document.querySelector('#recurring-nodes a.node').getAttribute('href')")
    page.click("#recurring-nodes a.node")
    assert page.evaluate("location.pathname") == node and page.evaluate("document.body.dataset.page") == "node"
    page.goto(service.url + "/ui/jobs?outcome=")  # the badges wear their outcome's colour of the charts
    badges = page.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('#jobs span.outcome'))"
                           ".map((b) => [b.textContent, getComputedStyle(b).backgroundColor]))")
    assert {o for o in outcomes if o in badges} >= {"gpu_hardware", "nvlink"}
    assert all(badges[o] == _rgb(c) for o, c in outcomes.items() if o in badges), (badges, outcomes)
    page.click('tr[data-outcome="nvlink"] td a')
    page.wait_for(READY)
    cached = page.evaluate("performance.getEntriesByType('resource').filter((r) => r.name.includes('/ui/assets/'))"
                           ".map((r) => r.transferSize)")
    assert cached == [0], cached  # from the browser's cache: not sent again
    assert out.exists() and page.problems() == []


def test_the_service_root_leads_to_the_dashboard(browser, service):  # noqa: F811
    page = browser.new_page()
    page.allowed = (service.url + "/",)
    page.goto(service.url + "/")
    assert page.evaluate("location.pathname") in ("/ui/jobs", "/ui/login")
    _sign_in(page, service)
    assert page.evaluate("location.pathname") == "/ui/jobs" and page.problems() == []


def test_a_slashed_job_id_and_url_characters_in_names_open_from_their_links(browser, service):  # noqa: F811
    """A Kueue workload's id is namespace/name, and cluster and node names may hold `#`, `?` and `%`: the links
    carry them as one path segment each, the pages they lead to name them whole."""
    cluster, job, nodes = "lab#east", "team/train-3", ["rack7?gpu01", "gpu#2%2F41é"]
    body = {"nodes": nodes, "state": "NODE_FAIL", "failed_node": nodes[0], "start": "2026-11-30T08:00:00Z",
            "end": "2026-11-30T09:00:00Z"}
    r = httpx.post(f"{service.url}/v1/jobs/{quote(cluster, safe='')}/{quote(job, safe='')}/context", json=body,
                   headers=service.auth("report"), timeout=60)
    assert r.status_code == 200, r.text
    page = browser.new_page()
    page.allowed = (service.url + "/",)
    page.goto(service.url + "/ui/jobs?" + "cluster=" + quote(cluster, safe="") + "&outcome=")
    _sign_in(page, service)
    page.click(f'tr[data-job="{cluster}/{job}"] td a')
    assert page.evaluate("location.pathname") == "/ui/jobs/lab%23east/team%2Ftrain-3"
    assert page.evaluate("document.querySelector('h1').textContent").startswith(f"Job {job}")
    page.wait_for(READY)
    page.click("#culprits a.node")
    assert page.evaluate("location.pathname") == "/ui/nodes/lab%23east/rack7%3Fgpu01"
    assert page.evaluate("document.querySelector('h1').textContent") == f"Node {nodes[0]} on {cluster}"
    page.goto(service.url + "/ui/nodes/" + quote(cluster, safe="") + "/" + quote(nodes[1], safe=""))
    assert page.evaluate("document.querySelector('h1').textContent") == f"Node {nodes[1]} on {cluster}"
    assert page.problems() == []
