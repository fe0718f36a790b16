"""attribution.reports.timeline (with pages/timeline_*): the job timeline, built from the engine's verdict and opened in a
real headless Chromium: no console error, the right outcome, culprits and root cause, the root cause first and its
consequences after it, source lines on hover and click, and readable for 64 nodes with 20,000 symptom lines."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import yaml

from attribution.fleetgen import write_bundle
from attribution.reports.timeline_data import CELL_BUDGET, build_timeline, nice_bin_seconds
from attribution.reports.vega import script_bundle
from attribution.pipeline.diagnose import LISTED_SYMPTOMS, diagnose_bundle
from attribution.reports.render import verdict_to_dict
from attribution.reports.timeline import write_timeline

from tests.conftest import INCIDENTS, bundles
from tests.harness.bigjob import CULPRIT, NODES, big_job
from tests.harness.chromium import artifacts_dir, browser  # noqa: F401  (fixture)

#: Bounds for the 64-node, 20,000-symptom job: the page file, and the time from navigation to charts drawn.
BIG_PAGE_BYTES = 3_000_000
BIG_PAGE_SECONDS = 15.0

FACTS = """(() => {
  const q = (s) => document.querySelector(s);
  const items = Array.from(document.querySelectorAll('#sequence > li')).map((li) => ({
    role: li.dataset.role, kind: li.dataset.kind || '', node: li.dataset.node || '',
    first: li.dataset.first || '', count: Number(li.dataset.count || 1)}));
  return {
    outcome: q('#outcome').textContent.trim(),
    culprits: Array.from(document.querySelectorAll('#culprits [data-node]')).map((e) => e.dataset.node),
    root: {kind: q('#root-cause').dataset.kind, node: q('#root-cause').dataset.node},
    items: items,
    labels: Array.from(document.querySelectorAll('#timeline g.role-axis-label text')).map((t) => t.textContent),
    marks: document.querySelectorAll('#timeline [aria-roledescription]').length,
    rootMarks: document.querySelectorAll('#timeline path[aria-label*="ROOT CAUSE"]').length,
  };
})()"""

POINT_AT_ROOT = """(async () => {
  const el = document.querySelector('#timeline path[aria-label*="ROOT CAUSE"]');
  const r = el.getBoundingClientRect();
  const at = {bubbles: true, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2};
  el.dispatchEvent(new PointerEvent('pointermove', at));
  el.dispatchEvent(new MouseEvent('click', at));
  await new Promise((done) => setTimeout(done, 300));
  const tip = document.querySelector('#vg-tooltip-element, .vg-tooltip');
  return {tooltip: tip ? tip.innerText : '', detail: document.getElementById('detail').innerText};
})()"""


@pytest.fixture(scope="module")
def js():
    """The chart library's JavaScript, bundled once for every page of this module."""
    return script_bundle()


@pytest.fixture(scope="module")
def shots(request):
    folder = artifacts_dir() / "timeline"
    folder.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"timeline screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def big(ruleset, tmp_path_factory):
    """The 64-node job with 20,000+ symptom lines, diagnosed through the pipeline."""
    job, _ = big_job()
    return diagnose_bundle(ruleset, write_bundle(job, tmp_path_factory.mktemp("bigjob")))


def _time(value: str) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@pytest.mark.browser
@pytest.mark.parametrize("bundle", bundles(INCIDENTS), ids=lambda p: p.name)
def test_incident_timeline_shows_the_root_cause_first_then_its_consequences(
        bundle, ruleset, browser, js, shots, tmp_path):  # noqa: F811
    expected = yaml.safe_load((bundle / "expected.yaml").read_text())
    d = diagnose_bundle(ruleset, bundle)
    page_file = write_timeline(d, tmp_path / f"{bundle.name}.html", js)
    page = browser.new_page()
    seconds = page.open(page_file)
    page.screenshot(shots / f"{bundle.name}.png")
    assert page.problems() == []
    assert seconds < 10
    facts = page.evaluate(FACTS)

    assert facts["outcome"] == expected["outcome"]
    assert facts["culprits"] == expected["culprits"]
    assert set(d.context.nodes) <= set(facts["labels"]), "one row per node"
    items = facts["items"]
    root = expected["root_cause"]
    if root is None:
        assert items[0]["role"] == "no_root_cause"
        assert not any(i["role"] == "consequence" for i in items)
        return
    assert facts["root"] == {"kind": root["kind"], "node": root["node"]}
    assert (items[0]["role"], items[0]["kind"], items[0]["node"]) == ("root_cause", root["kind"], root["node"])
    assert facts["rootMarks"] >= 1, "the root cause is marked on the chart"
    # its consequences come right after it, in the order they began, none before it (untimed ones sit at the
    # job end; across nodes the engine allows its clock-skew tolerance)
    consequences = []
    for item in items[1:]:
        if item["role"] != "consequence":
            break
        consequences.append(item)
    assert not any(i["role"] == "consequence" for i in items[1 + len(consequences):])
    explained = sum(1 for s in d.verdict.symptoms if s.explained_by == "root_cause")
    assert sum(i["count"] for i in consequences) == explained
    root_time = d.verdict.root_cause.time or d.context.end
    skew = timedelta(seconds=ruleset.graph.clock_skew_seconds)
    firsts = [_time(i["first"]) for i in consequences]
    timed = [t for t in firsts if t is not None]
    assert all(t >= root_time - skew for t in timed)
    assert timed == sorted(timed) and firsts[:len(timed)] == timed, "timed ones in order, untimed ones last"


@pytest.mark.browser
def test_hover_and_click_show_the_source_line(ruleset, browser, js, tmp_path):  # noqa: F811
    d = diagnose_bundle(ruleset, INCIDENTS / "04-xid74-nvlink")
    page = browser.new_page()
    page.open(write_timeline(d, tmp_path / "04.html", js))
    shown = page.evaluate(POINT_AT_ROOT)
    assert page.problems() == []
    line = d.verdict.root_cause.line
    assert line[:60] in shown["tooltip"]
    assert d.verdict.root_cause.location in shown["detail"] and line in shown["detail"]


@pytest.mark.browser
def test_sixty_four_nodes_and_20000_symptom_lines_stay_readable(big, browser, js, shots, tmp_path):  # noqa: F811
    d = big
    # the engine lists the first LISTED_SYMPTOMS and counts them all: the page draws what is listed, says the total
    assert len(d.context.nodes) == 64 and d.verdict.symptoms_total >= 20_000
    assert len(d.verdict.symptoms) == LISTED_SYMPTOMS
    page_file = write_timeline(d, tmp_path / "big.html", js)
    size = page_file.stat().st_size
    page = browser.new_page()
    seconds = page.open(page_file, ready_timeout=60)
    page.screenshot(shots / "64-nodes-20000-symptoms.png")
    assert page.problems() == []
    facts = page.evaluate(FACTS)
    print(f"64 nodes, {d.verdict.symptoms_total} symptoms ({len(d.verdict.symptoms)} listed): {size / 1e6:.2f} MB, "
          f"drawn in {seconds:.2f} s, {facts['marks']} chart marks")
    assert f"{d.verdict.symptoms_total} symptom lines" in page.evaluate("document.getElementById('followed')"
                                                                         ".textContent")
    assert size < BIG_PAGE_BYTES
    assert seconds < BIG_PAGE_SECONDS
    assert facts["outcome"] == "gpu_hardware" and facts["culprits"] == [CULPRIT]
    assert facts["root"] == {"kind": "gpu_fallen_off_bus", "node": CULPRIT}
    assert set(NODES) <= set(facts["labels"])
    assert facts["marks"] < 2 * CELL_BUDGET, "symptoms are binned, not drawn one by one"
    roles = [i["role"] for i in facts["items"]]
    assert roles[0] == "root_cause" and len(roles) > 1 and set(roles[1:]) == {"consequence"}, roles


@pytest.mark.slow
def test_binning_keeps_every_symptom_in_a_bounded_number_of_bins(big):
    d = big
    tl = build_timeline(verdict_to_dict(d.verdict), d.events)
    assert sum(b.count for b in tl.bins) == len(d.verdict.symptoms)
    assert len([b for b in tl.bins if b.start is not None]) <= CELL_BUDGET
    assert all(len(b.examples) <= 3 for b in tl.bins)


def test_events_outside_the_job_window_are_listed_apart_not_drawn(ruleset):
    """04's trap: an Xid 74 on kes-n201 nine minutes after the job ended belongs to the next job."""
    d = diagnose_bundle(ruleset, INCIDENTS / "04-xid74-nvlink")
    tl = build_timeline(verdict_to_dict(d.verdict), d.events)
    assert [(m.kind, m.row) for m in tl.outside] == [("nvlink_error", "kes-n201")]
    assert all(m.row != "kes-n201" for m in tl.causes)
    assert tl.root is not None and tl.root.row == "kes-n203"
    assert tl.culprits == (("kes-n203", "0000:3a:00"),)


def test_bins_are_widths_a_person_reads():
    assert nice_bin_seconds(60, 100) == 1
    assert nice_bin_seconds(22 * 60, 37) == 60
    assert nice_bin_seconds(3 * 3600, 100) == 120
    assert nice_bin_seconds(10 * 86400, 24) == 43200
    assert nice_bin_seconds(60 * 86400, 24) == 86400


@pytest.mark.browser
def test_log_text_is_shown_as_text_never_run(browser, js, tmp_path):  # noqa: F811
    """A log line is data: markup or a closing script tag in it must neither run nor break the page."""
    from attribution.reports.timeline import render_timeline

    evil = "</script><script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> & <b>bold</b>"
    cause = {"kind": "gpu_fallen_off_bus", "code": 79, "node": "n1", "gpu": None, "rank": None,
             "time": "2026-01-01T00:10:00Z", "source": "kernel", "rule": "kernel.xid", "location": "k.log:1",
             "line": evil, "role": "cause", "outcome": "gpu_hardware", "action": "drain_node"}
    symptom = dict(cause, kind="nccl_error", location="job.out:2", rule="job.nccl_warn", node="n2",
                   time="2026-01-01T00:10:05Z", explained_by="root_cause")
    doc = {"job": {"cluster": "c<1>", "job_id": "7", "state": "FAILED", "nodes": ["n1", "n2"],
                   "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:20:00Z"},
           "outcome": "gpu_hardware", "confidence": "high", "action": "drain_node", "root_cause": cause,
           "culprits": [{"node": "n1", "gpu": None}], "symptoms": [symptom], "other_causes": [],
           "explanation": evil, "coverage": [], "rules_version": "x"}
    page_file = tmp_path / "evil.html"
    page_file.write_text(render_timeline(doc, (), js))
    page = browser.new_page()
    page.open(page_file)
    assert page.problems() == []
    assert page.evaluate("window.pwned === undefined")
    assert page.evaluate("document.querySelector('#explanation').textContent") == evil
    assert page.evaluate("document.querySelector('#job-id').textContent") == "c<1>/7"
    shown = page.evaluate(POINT_AT_ROOT)
    assert evil in shown["detail"] and page.evaluate("window.pwned === undefined")
