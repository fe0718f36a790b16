"""The dashboard (attribution/web) and the browsing endpoints behind it, on the real service over the demo data:
sign-in, the job list's filters and paging, the job page, the node page, the fleet and drain pages, and that
no page is reachable without a session or leaks a token into a URL."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest

httpx = pytest.importorskip("httpx")

from sqlalchemy import text

from attribution.store import browse

from tests.harness.demo_store import demo_store, ingest_counter_cases  # noqa: F401  (fixture)
from tests.harness.service import start_service


@pytest.fixture(scope="module")
def service(demo_store, tmp_path_factory):  # noqa: F811
    svc = start_service(demo_store.url, tmp_path_factory.mktemp("dashboard"))
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def counter_jobs(demo_store, ruleset):  # noqa: F811
    """The demo data and two jobs whose evidence is counters only (harness.demo_store.COUNTER_CASES)."""
    ingest_counter_cases(demo_store.engine, ruleset)
    return demo_store


@pytest.fixture(scope="module")
def browser_session(service):
    """An httpx client signed in through the login form, as a browser would be."""
    with httpx.Client(base_url=service.url, follow_redirects=False, timeout=60) as client:
        r = client.post("/ui/login", data={"token": service.tokens["read"], "next": "/ui/jobs"})
        assert r.status_code == 303 and r.headers["location"] == "/ui/jobs"
        yield client


def test_pages_need_a_session_and_come_back_after_sign_in(service):
    with httpx.Client(base_url=service.url, follow_redirects=False, timeout=60) as client:
        r = client.get("/ui/nodes/c1/gpu1?days=30")
        assert r.status_code == 303
        target = urlparse(r.headers["location"])
        assert target.path == "/ui/login"
        assert parse_qs(target.query)["next"] == ["/ui/nodes/c1/gpu1?days=30"]
        r = client.post("/ui/login", data={"token": service.tokens["read"], "next": "/ui/nodes/c1/gpu1?days=30"})
        assert r.status_code == 303 and r.headers["location"] == "/ui/nodes/c1/gpu1?days=30"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui/" in cookie
        assert service.tokens["read"] not in cookie  # the cookie names the token, it does not carry it
        assert client.get("/ui/nodes/c1/gpu1?days=30").status_code == 200


def test_a_report_only_token_or_a_forged_cookie_does_not_sign_in(service):
    with httpx.Client(base_url=service.url, follow_redirects=False, timeout=60) as client:
        r = client.post("/ui/login", data={"token": service.tokens["report"]})
        assert r.status_code == 401 and "lacks the read scope" in r.text
        good = httpx.post(service.url + "/ui/login", data={"token": service.tokens["read"]}, timeout=60).cookies
        value = good.get("attribution_session")
        digest, expires, sig = value.split(".")
        forged = f"{digest}.{int(expires) + 10**6}.{sig}"  # a longer life without the key
        client.cookies.set("attribution_session", forged, path="/ui/")
        assert client.get("/ui/jobs").status_code == 303


def test_sign_in_never_redirects_off_the_dashboard(service):
    for evil in ("https://evil.example/", "//evil.example/ui/", "/v1/jobs", "/ui\\..\\x"):
        r = httpx.post(service.url + "/ui/login", data={"token": service.tokens["read"], "next": evil},
                       follow_redirects=False, timeout=60)
        assert r.headers["location"] == "/ui/jobs", evil


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)" data-outcome="([^"]*)"', html)


def test_the_job_list_shows_failed_jobs_newest_first_and_pages_to_the_end(browser_session, demo_store):
    with demo_store.engine.connect() as c:
        failed = c.execute(text(
            "SELECT count(*) FROM attribution.job_verdicts WHERE outcome IS DISTINCT FROM 'none'")).scalar()
    seen: list[tuple[str, str]] = []
    url = "/ui/jobs"
    while url:
        r = browser_session.get(url)
        assert r.status_code == 200
        seen += _rows(r.text)
        nxt = re.search(r'<a href="([^"]+)" id="older">', r.text)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert len(seen) == failed == len(set(seen))
    assert all(outcome != "none" for _, outcome in seen)


def test_job_list_filters_by_outcome_node_and_cluster(browser_session, demo_store):
    with demo_store.engine.connect() as c:
        row = c.execute(text(
            "SELECT cluster, root_node, count(*) OVER (PARTITION BY cluster, root_node) FROM attribution.job_verdicts "
            "WHERE outcome = 'gpu_hardware' AND root_node IS NOT NULL ORDER BY 3 DESC, 1, 2 LIMIT 1")).one()
        cluster, node = row[0], row[1]
        expected = c.execute(text(
            "SELECT count(*) FROM attribution.jobs j JOIN attribution.verdicts v ON v.id = j.current_verdict_id "
            "WHERE j.cluster = :c AND :n = ANY (j.nodes) AND v.outcome = 'gpu_hardware'"),
            {"c": cluster, "n": node}).scalar()
    r = browser_session.get("/ui/jobs", params={"cluster": cluster, "node": node, "outcome": "gpu_hardware"})
    rows = _rows(r.text)
    assert len(rows) == expected >= 1
    assert {o for _, o in rows} == {"gpu_hardware"} and all(j.startswith(cluster + "/") for j, _ in rows)
    r = browser_session.get("/ui/jobs", params={"outcome": ""})  # any outcome, completed jobs included
    assert any(o == "none" for _, o in _rows(r.text))


def test_the_from_field_takes_what_the_command_line_takes(browser_session, demo_store):
    """#32: the From field refused `now-7d`, which the CLI took. The boundary is put where no job ended within an
    hour of it, so the seconds between the requests change nothing."""
    from datetime import datetime, timedelta, timezone

    now = datetime.now(timezone.utc)
    with demo_store.engine.connect() as c:
        ends = [r[0] for r in c.execute(text(
            "SELECT coalesce(j.end_time, j.start_time) FROM attribution.jobs j "
            "JOIN attribution.verdicts v ON v.id = j.current_verdict_id WHERE v.outcome IS DISTINCT FROM 'none'"))]
    hours = next(h for h in range(1, 24 * 60) if all(abs(e - (now - timedelta(hours=h))) > timedelta(hours=1)
                                                    for e in ends) and 0 < sum(e >= now - timedelta(hours=h)
                                                                                for e in ends) <= 50)
    expected = sum(e >= now - timedelta(hours=hours) for e in ends)
    iso = (now - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for since in (f"{hours}h", f"now-{hours}h", f"{hours} hours ago", iso):
        r = browser_session.get("/ui/jobs", params={"since": since})
        assert r.status_code == 200, r.text
        assert len(_rows(r.text)) == expected, since
        assert f'value="{since}"' in r.text  # the field keeps what was typed


def test_bad_filters_answer_400_with_the_problem_not_a_trace(browser_session):
    r = browser_session.get("/ui/jobs", params={"since": "last tuesday"})
    assert r.status_code == 400 and "since: not a time: &#39;last tuesday&#39; (use an ISO 8601 time" in r.text
    r = browser_session.get("/ui/jobs", params={"after": "!!!"})
    assert r.status_code == 400 and "not a cursor" in r.text
    r = browser_session.get("/ui/jobs", params={"outcome": "<script>"})
    assert r.status_code == 400 and "<script>" not in r.text  # autoescaped


def test_the_job_page_shows_root_cause_and_links_the_culprit(browser_session, demo_store):
    with demo_store.engine.connect() as c:
        job = c.execute(text(
            "SELECT cluster, job_id, job_start, root_kind, root_node, culprit_nodes FROM attribution.job_verdicts "
            "WHERE root_kind = 'nvlink_error' ORDER BY job_end DESC, job_id LIMIT 1")).first()
    assert job is not None
    r = browser_session.get(f"/ui/jobs/{job.cluster}/{job.job_id}")
    assert r.status_code == 200
    assert 'id="outcome">nvlink<' in r.text
    root = re.search(r'<dd id="root-cause">(.*?)</dd>', r.text, re.S).group(1)
    assert "nvlink_error" in root and f'href="/ui/nodes/{job.cluster}/{job.root_node}"' in root
    culprits = re.search(r'<dd id="culprits">(.*?)</dd>', r.text, re.S).group(1)
    assert all(f">{n}</a>" in culprits for n in job.culprit_nodes)
    timeline = browser_session.get(re.search(r'<a href="([^"]+)" id="whole-timeline">', r.text).group(1)
                                   .replace("&amp;", "&"))
    assert timeline.status_code == 200 and "chart-specs" in timeline.text and 'id="sequence"' in timeline.text
    assert timeline.text.count('nav class="top"') == 1  # the dashboard's frame around it


def test_the_job_page_shows_the_verdict_once_and_draws_the_timeline_in_the_page(browser_session, demo_store):
    with demo_store.engine.connect() as c:
        job = c.execute(text("SELECT cluster, job_id FROM attribution.job_verdicts WHERE root_kind = 'nvlink_error' "
                             "ORDER BY job_end DESC, job_id LIMIT 1")).one()
    html = browser_session.get(f"/ui/jobs/{job.cluster}/{job.job_id}").text
    assert html.count('id="verdict"') == html.count('id="outcome"') == html.count('id="explanation"') == 1
    assert "<iframe" not in html and '<div class="chart" id="timeline">' in html
    # the chart's note for a browser without JavaScript only shows there
    assert re.search(r"<noscript>[^<]*<p[^>]*>The chart needs JavaScript", html)
    assert html.count("The chart needs JavaScript") == 1


def test_the_counts_beside_the_explanation_agree_with_it(browser_session, demo_store):
    """The explanation's "N consequences" counts the symptoms and the other causes; the line beside it says
    both and adds up to the same N, on the job page and on the timeline page."""
    with demo_store.engine.connect() as c:
        jobs = c.execute(text("SELECT cluster, job_id, job_start, explanation FROM attribution.job_verdicts "
                              "WHERE explanation LIKE '%consequences on%'")).all()
    assert len(jobs) >= 5
    for j in jobs:
        said = int(re.search(r"(\d+) consequences on", j.explanation).group(1))
        for part in ("", "/timeline"):
            html = browser_session.get(f"/ui/jobs/{j.cluster}/{j.job_id}{part}").text
            beside = re.search(r'id="followed">([^<]*)<', html).group(1)
            numbers = [int(n) for n in re.findall(r"\d+", beside)]
            assert numbers[0] == said, (j.job_id, beside, j.explanation)
            assert sum(numbers[1:]) in (0, said), beside  # "119 events ...: 118 symptom lines and 1 other cause"


def test_an_unknown_job_is_a_404_page(browser_session):
    r = browser_session.get("/ui/jobs/nowhere/123")
    assert r.status_code == 404 and "No job 123 on cluster nowhere" in r.text


def test_the_node_page_shows_recurring_faults_failed_jobs_and_drain_status(browser_session, demo_store):
    with demo_store.engine.connect() as c:
        rec = c.execute(text("SELECT cluster, node, kind, weeks FROM attribution.recurring_faults "
                             "ORDER BY weeks DESC, events DESC, cluster, node LIMIT 1")).one()
        candidate = c.execute(text("SELECT score FROM attribution.drain_candidates WHERE cluster = :c AND node = :n"),
                              {"c": rec.cluster, "n": rec.node}).first()
    r = browser_session.get(f"/ui/nodes/{rec.cluster}/{rec.node}")
    assert r.status_code == 200
    table = re.search(r'<table id="recurring">(.*?)</table>', r.text, re.S).group(1)
    assert rec.kind in table
    assert 'id="faults-weekly"' in r.text and 'id="failed-jobs"' in r.text
    status = re.search(r'id="drain-status">(.*?)</b>', r.text).group(1)
    assert ("the drain policy names it" in status) == (candidate is not None)


def test_fleet_and_drain_pages_render(browser_session, demo_store):
    r = browser_session.get("/ui/fleet")
    assert r.status_code == 200 and 'href="/ui/jobs"' in r.text and "chart-specs" in r.text
    r = browser_session.get("/ui/drain")
    assert r.status_code == 200
    with demo_store.engine.connect() as c:
        nodes = [n for (n,) in c.execute(text("SELECT node FROM attribution.drain_candidates"))]
    for n in nodes:
        assert f">{n}</a>" in r.text


def test_pages_forbid_scripts_except_the_chart_pages(browser_session):
    csp = browser_session.get("/ui/jobs").headers["content-security-policy"]
    assert "script-src" not in csp and "default-src 'none'" in csp
    assert browser_session.get("/ui/jobs").headers["cache-control"] == "no-store"


def test_v1_jobs_pages_with_a_cursor_and_v1_nodes_answers_the_history(service, demo_store):
    auth = service.auth("read")
    got, after = [], None
    while True:
        params = {"outcome": "failed", "limit": 17, **({"after": after} if after else {})}
        body = httpx.get(service.url + "/v1/jobs", params=params, headers=auth).json()
        got += [(j["cluster"], j["job_id"], j["job_start"]) for j in body["jobs"]]
        after = body["next"]
        if after is None:
            break
    with demo_store.engine.connect() as c:
        want = c.execute(text("SELECT cluster, job_id FROM attribution.job_verdicts "
                              "WHERE outcome IS DISTINCT FROM 'none'")).all()
    assert len(got) == len(want) == len(set(got))
    assert httpx.get(service.url + "/v1/jobs", headers={}).status_code == 401
    assert httpx.get(service.url + "/v1/jobs", params={"after": "zz"}, headers=auth).status_code == 422
    node = httpx.get(service.url + "/v1/nodes/kes/kes-n203", headers=auth).json()
    assert node["node"] == "kes-n203" and isinstance(node["faults_weekly"], list)


def test_cursor_round_trip_and_refuses_garbage():
    from datetime import datetime, timezone

    c = browse.Cursor(datetime(2026, 4, 9, 16, 40, 52, tzinfo=timezone.utc), 42)
    assert browse.Cursor.decode(c.encode()) == c
    from attribution.errors import InputError

    with pytest.raises(InputError):
        browse.Cursor.decode("bm90IGEgY3Vyc29y")


def test_the_job_page_shows_the_counter_changes_that_became_evidence(browser_session, counter_jobs):
    r = browser_session.get("/ui/jobs/ash/5530917")
    assert r.status_code == 200 and 'id="outcome">gpu_hardware<' in r.text
    table = re.search(r'<table id="counter-evidence">(.*?)</table>', r.text, re.S).group(1)
    rows = re.findall(r'<tr data-kind="([^"]+)" data-node="([^"]+)">(.*?)</tr>', table, re.S)
    assert {(k, n) for k, n, _ in rows} == {("gpu_ecc_counter", "ash-h100-02")}
    cells = [re.findall(r'<td class="mono">([^<]*)</td>', body) for _, _, body in rows]
    deltas = sorted(tuple(c[-2:]) for c in cells)
    assert deltas == [("ecc.aggregate.dram_uncorrectable", "0 -&gt; 2"), ("ecc.volatile.dram_uncorrectable", "0 -&gt; 2"),
                      ("remapped_rows.uncorrectable", "0 -&gt; 1")]
    assert table.count(">root cause<") == 1 and 'href="/ui/nodes/ash/ash-h100-02"' in table
    r = browser_session.get("/ui/jobs/ash/5531204")
    table = re.search(r'<table id="counter-evidence">(.*?)</table>', r.text, re.S).group(1)
    assert 'data-kind="gpu_vanished"' in table and "0 -&gt; gone" in table and ">root cause<" in table


def test_a_job_without_counter_evidence_says_so(browser_session, demo_store):
    with demo_store.engine.connect() as c:
        job = c.execute(text("SELECT cluster, job_id FROM attribution.job_verdicts WHERE root_kind = 'nvlink_error' "
                             "ORDER BY job_end DESC, job_id LIMIT 1")).one()
    r = browser_session.get(f"/ui/jobs/{job.cluster}/{job.job_id}")
    assert '<p class="muted" id="counter-evidence">No counter snapshot of this job changed' in r.text


def test_the_node_page_shows_its_latest_counters_and_counter_events(browser_session, counter_jobs):
    r = browser_session.get("/ui/nodes/ash/ash-h100-02", params={"days": 3660})
    assert r.status_code == 200
    gpus = re.search(r'<table id="gpu-counters">(.*?)</table>', r.text, re.S).group(1)
    rows = dict(re.findall(r'<tr data-gpu="([^"]+)">(.*?)</tr>', gpus, re.S))
    assert len(rows) == 8
    # GPU 3 is not in the newer job's epilog snapshot (it vanished): its newest values are job 5530917's
    assert ">5530917</a>" in rows["0000:61:00"] and '<td class="num bad">1 / 0</td>' in rows["0000:61:00"]
    assert '<td class="num bad">2</td>' in rows["0000:61:00"]  # aggregate uncorrectable ECC
    assert all(">5531204</a>" in body for g, body in rows.items() if g != "0000:61:00")
    events = re.search(r'<table id="counter-events">(.*?)</table>', r.text, re.S).group(1)
    kinds = re.findall(r'<tr data-kind="([^"]+)">', events)
    assert kinds == ["gpu_vanished", "gpu_ecc_counter", "gpu_ecc_counter"]  # newest first
    assert 'href="/ui/jobs/ash/5531204?start=' in events and 'href="/ui/jobs/ash/5530917?start=' in events
    r = browser_session.get("/ui/nodes/ash/ash-h100-01", params={"days": 3660})
    assert '<p class="muted" id="counter-events">No counter changed' in r.text
    assert r.text.count("<tr data-gpu=") == 8


def test_v1_nodes_answers_the_node_telemetry(service, counter_jobs):
    node = httpx.get(service.url + "/v1/nodes/ash/ash-h100-02", params={"days": 3660},
                     headers=service.auth("read")).json()
    by_gpu = {g["gpu"]: g for g in node["gpu_counters"]}
    assert len(by_gpu) == 8 and by_gpu["0000:61:00"]["remapped_rows_uncorrectable"] == 1.0
    assert by_gpu["0000:61:00"]["last_job_id"] == "5530917"
    assert [(e["kind"], e["role"], e["gpu"], e["job_id"]) for e in node["counter_events"]] == [
        ("gpu_vanished", "cause", "0000:61:00", "5531204"), ("gpu_ecc_counter", "cause", "0000:61:00", "5530917"),
        ("gpu_ecc_counter", "cause", "0000:61:00", "5530917")]
    assert node["counter_events_truncated"] is False and node["port_counters"] == []


def test_the_node_page_says_why_a_node_is_a_drain_candidate(browser_session):
    """#31: dgx017's page names the recurrence condition it meets, and lists every condition, nearest first."""
    r = browser_session.get("/ui/nodes/demo/dgx017")
    assert r.status_code == 200
    why = re.search(r'<p id="drain-why">(.*?)</p>', r.text, re.S).group(1)
    assert "nvlink-weekly: 5 weeks of 3 needed: candidate" in why
    table = re.search(r'<table id="drain-conditions">(.*?)</table>', r.text, re.S).group(1)
    rows = re.findall(r'<tr data-condition="([^"]+)"', table)
    assert rows[0] == "nvlink-weekly" and {"gpu-lost", "nvlink-repeat", "culprit-two-users"} <= set(rows)
    assert "all (recurrence)" in table and "since the last reboot or resume" in table


def test_the_service_root_leads_to_the_dashboard(service):
    r = httpx.get(service.url + "/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs"
    r = httpx.get(service.url + "/", follow_redirects=True)  # and on to the sign-in form, for a new browser
    assert r.status_code == 200 and urlparse(str(r.url)).path == "/ui/login"


def test_every_page_sets_its_text_in_one_font_family(browser_session):
    """The page CSS goes into <style> as it is: escaped by the template, its quoted font names broke the body's
    font rule and the browser fell back to its serif default."""
    from attribution.reports.shell import FONT

    for path in ("/ui/jobs", "/ui/drain", "/ui/fleet", "/ui/login"):
        html = browser_session.get(path).text
        style = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
        assert f"font:14px/1.45 {FONT};" in style and "&#34;" not in style, path


def test_the_fleet_page_is_light_has_the_dashboard_frame_and_links_its_names(browser_session, demo_store):
    r = browser_session.get("/ui/fleet")
    assert r.status_code == 200
    html = r.text
    assert len(r.content) < 100_000  # the chart library is not inlined (it was 919 KB)
    assert html.count('<nav class="top">') == 1 and 'href="/ui/drain"' in html and 'href="/ui/jobs"' in html
    with demo_store.engine.connect() as c:
        rec = c.execute(text("SELECT DISTINCT cluster, node FROM attribution.recurring_faults")).all()
        drain = c.execute(text("SELECT cluster, node FROM attribution.drain_candidates")).all()
    assert rec and all(f'href="/ui/nodes/{c}/{n}"' in html for c, n in rec + drain)
    assert re.search(r'<a href="/ui/jobs/[^/"]+/[^/"]+">', html)  # the drain evidence's jobs
    # one shared specification for the sparklines, each sparkline its data only
    specs = json.loads(re.search(r'<script type="application/json" id="chart-specs">(.*?)</script>', html,
                                 re.S).group(1))
    sparks = [s for s in specs["charts"].values() if "template" in s]
    assert len(sparks) >= 2 and set(specs["templates"]) == {s["template"] for s in sparks}


def test_the_chart_library_is_served_once_and_kept_by_the_browser(browser_session):
    src = re.search(r'<script src="(/ui/assets/vega-[0-9a-f]+\.js)"></script>',
                    browser_session.get("/ui/fleet").text).group(1)
    job_page = browser_session.get("/ui/jobs", params={"outcome": "gpu_hardware"}).text
    job = re.search(r'<a href="(/ui/jobs/[^"]+)">', job_page).group(1).replace("&amp;", "&")
    assert f'<script src="{src}"></script>' in browser_session.get(job).text  # the same URL on every chart page
    r = httpx.get(browser_session.base_url.join(src), headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert "vegaEmbed" in r.text and r.num_bytes_downloaded < len(r.content) / 2
    assert httpx.get(browser_session.base_url.join("/ui/assets/vega-0000.js")).status_code == 404


def test_the_node_page_shows_weeks_without_faults_as_such(browser_session, demo_store):
    """Every ISO week of the period is a row: a week with faults, or a run of weeks without (one row saying so)."""
    from datetime import date, timedelta

    from attribution.timeparse import parse_iso

    with demo_store.engine.connect() as c:
        rec = c.execute(text("SELECT cluster, node FROM attribution.recurring_faults "
                             "ORDER BY weeks DESC, cluster, node LIMIT 1")).one()
    html = browser_session.get(f"/ui/nodes/{rec.cluster}/{rec.node}", params={"days": 91}).text
    since = parse_iso(re.search(r'since <b class="mono">([^<]+)</b>', html).group(1).replace(" ", "T"))
    with demo_store.engine.connect() as c:
        faulty = {d for (d,) in c.execute(text(
            "SELECT DISTINCT (date_trunc('week', occurred_at AT TIME ZONE 'UTC'))::date FROM attribution.events "
            "WHERE cluster = :c AND node = :n AND role = 'cause' AND occurred_at >= :s"),
            {"c": rec.cluster, "n": rec.node, "s": since})}
    table = re.search(r'<table id="faults-weekly">(.*?)</table>', html, re.S).group(1)
    rows = [(date.fromisoformat(w), 1, False) if w else (date.fromisoformat(first), int(n), True)
            for w, first, n in re.findall(r'<tr (?:data-week="([^"]+)"|class="quiet" data-from="([^"]+)" '
                                          r'data-weeks="(\d+)")>', table)]
    assert {w for w, _, quiet in rows if not quiet} == faulty
    assert any(quiet for _, _, quiet in rows) and "no fault events" in table
    monday = since.date() - timedelta(days=since.weekday())
    for first, n, _ in reversed(rows):  # oldest first: each row starts where the one before it ended
        assert first == monday, (first, monday)
        monday = first + timedelta(weeks=n)
    last = (since + timedelta(days=91)).date()
    assert monday == last - timedelta(days=last.weekday()) + timedelta(weeks=1)  # up to this week


#: A Kueue workload's id is namespace/name; cluster and node names may hold `#`, `?` and `%` (attribution/names.py).
ODD = {"cluster": "lab#east", "job_id": "team/train-3", "nodes": ["rack7?gpu01", "gpu#2%2F41é"]}


@pytest.fixture(scope="module")
def odd_names(service):
    """A job whose cluster, id and nodes hold characters a URL path gives a meaning to, reported to the service
    (a NODE_FAIL on the first node: that node is the culprit)."""
    from urllib.parse import quote

    body = {"nodes": ODD["nodes"], "state": "NODE_FAIL", "failed_node": ODD["nodes"][0],
            "start": "2026-11-30T08:00:00Z", "end": "2026-11-30T09:00:00Z"}
    url = f"{service.url}/v1/jobs/{quote(ODD['cluster'], safe='')}/{quote(ODD['job_id'], safe='')}/context"
    r = httpx.post(url, json=body, headers=service.auth("report"), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["job"]["cluster"] == ODD["cluster"] and r.json()["job"]["job_id"] == ODD["job_id"]
    return ODD


def test_names_with_a_slash_or_url_characters_lead_to_their_pages(browser_session, odd_names):
    listing = browser_session.get("/ui/jobs", params={"cluster": odd_names["cluster"], "outcome": ""}).text
    link = re.search(r'<tr data-job="lab#east/team/train-3"[^>]*>\s*<td><a href="([^"]+)">', listing).group(1)
    assert link.startswith("/ui/jobs/lab%23east/team%2Ftrain-3?start=")
    r = browser_session.get(link.replace("&amp;", "&"))
    assert r.status_code == 200 and "Job team/train-3" in r.text
    culprit = re.search(r'<dd id="culprits">.*?<a class="node" href="([^"]+)">([^<]+)</a>', r.text, re.S)
    assert culprit.groups() == ("/ui/nodes/lab%23east/rack7%3Fgpu01", "rack7?gpu01")
    node = browser_session.get(culprit.group(1))
    assert node.status_code == 200 and "Node rack7?gpu01" in node.text and "on lab#east" in node.text
    other = browser_session.get("/ui/nodes/lab%23east/gpu%232%252F41%C3%A9")  # a literal %2F, not a slash
    assert other.status_code == 200 and "Node gpu#2%2F41é" in other.text
    timeline = browser_session.get(link.replace("?", "/timeline?", 1).replace("&amp;", "&"))
    assert timeline.status_code == 200 and "lab#east/team/train-3" in timeline.text


def test_a_path_part_that_is_no_name_is_a_404_page_not_an_error(browser_session):
    for path in ("/ui/nodes/c1/gpu%5B1-2%5D", "/ui/nodes/c1/a%2Cb", "/ui/jobs/c%5B1%5D/7", "/ui/nodes/c1/" + "y" * 256,
                 "/ui/nodes/c1/gpu%2001", "/ui/nodes/c1/rack%2F7", "/ui/nodes/c1%0A/n1"):
        r = browser_session.get(path)
        assert r.status_code == 404 and "name (" in r.text and 'id="problem"' in r.text, path
    assert browser_session.get("/ui/nodes/c1/a%00b").status_code == 404  # no name holds a NUL


def test_the_job_page_shows_the_owners_line_the_requeue_plan_and_what_was_done(browser_session, demo_store):
    """The job's AdminComment line (act.notice), what the requeue policy says of it from the store, and the audit
    of what was done to the job id (job_actions)."""
    from attribution.store.jobactions import record

    with demo_store.engine.connect() as c:
        job = c.execute(text(
            "SELECT j.cluster, j.job_id, j.job_start, j.root_node, j.root_code, v.root_gpu "
            "FROM attribution.job_verdicts j JOIN attribution.verdicts v ON v.id = j.verdict_id "
            "WHERE j.root_kind = 'nvlink_error' ORDER BY j.job_end DESC, j.job_id LIMIT 1")).one()
        app = c.execute(text("SELECT cluster, job_id FROM attribution.job_verdicts WHERE outcome = 'application' "
                             "ORDER BY job_end DESC, job_id LIMIT 1")).one()
    with demo_store.engine.begin() as c:
        record(c, job.cluster, job.job_id, job.job_start, "requeue", "applied", "policy met", cause="k",
               nodes=[job.root_node], actor="epilog")
    html = browser_session.get(f"/ui/jobs/{job.cluster}/{job.job_id}").text
    line = re.search(r'<dd id="owner-line">(.*?)</dd>', html, re.S).group(1)
    assert f"attribution: nvlink, GPU {job.root_gpu} on {job.root_node} reported a fatal NVLink error " \
           f"(Xid {job.root_code}); not the application; resubmit</span>" in line
    plan = re.search(r'<dd id="requeue-plan">(.*?)</dd>', html, re.S).group(1)
    assert "skipped: the run ended more than 30 minutes ago" in plan  # the demo's jobs ended weeks ago
    done = re.search(r'<table id="job-actions">(.*?)</table>', html, re.S).group(1)
    assert 'data-action="requeue" data-decision="applied"' in done and f"<td>{job.root_node}</td>" in done
    html = browser_session.get(f"/ui/jobs/{app.cluster}/{app.job_id}").text
    plan = re.search(r'<dd id="requeue-plan">(.*?)</dd>', html, re.S).group(1)
    assert "not a candidate: outcome application is not one the policy requeues" in plan
    assert 'id="job-actions"' not in html
