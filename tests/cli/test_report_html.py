"""`attribution report job` (and the bad input of `report fleet`): a stored job's timeline is the page
`diagnose --html` draws, read back from the store; bad input is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attribution.pipeline.ingest import ingest_bundle

from tests.conftest import INCIDENTS
from tests.harness.chromium import artifacts_dir, browser  # noqa: F401  (fixture)

STORED_FACTS = """(() => ({
  outcome: document.querySelector('#outcome').textContent.trim(),
  culprits: Array.from(document.querySelectorAll('#culprits [data-node]')).map((e) => e.dataset.node),
  first: Object.assign({}, document.querySelector('#sequence > li').dataset),
  job: document.querySelector('#job-id').textContent.trim(),
}))()"""


def run(url: str | None, *args):
    env = dict(os.environ)
    env.pop("ATTRIBUTION_CONFIG", None)
    if url:
        env["ATTRIBUTION_DATABASE_URL"] = url
    return subprocess.run([sys.executable, "-m", "attribution.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.slow
@pytest.mark.browser
def test_report_job_draws_the_stored_verdict_like_diagnose(store, pg_url, ruleset, browser, tmp_path):  # noqa: F811
    for name in ("04-xid74-nvlink", "10-node-fail-no-logs"):
        ingest_bundle(ruleset, store, INCIDENTS / name)
    out = tmp_path / "stored-04.html"
    r = run(pg_url, "report", "job", "kestrel", "90417", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "nvlink" in r.stdout
    page = browser.new_page()
    page.open(out)
    page.screenshot(artifacts_dir() / "timeline" / "stored-kestrel-90417.png")
    assert page.problems() == []
    facts = page.evaluate(STORED_FACTS)
    assert facts["job"] == "kestrel/90417"
    assert facts["outcome"] == "nvlink" and facts["culprits"] == ["kes-n203"]
    assert (facts["first"]["role"], facts["first"]["kind"], facts["first"]["node"]) == \
        ("root_cause", "nvlink_error", "kes-n203")

    diagnosed = tmp_path / "diagnosed-04.html"
    assert run(None, "diagnose", str(INCIDENTS / "04-xid74-nvlink"), "--html", str(diagnosed)).returncode == 0
    page.open(diagnosed)
    same = page.evaluate(STORED_FACTS)
    assert same == facts, "the stored job's page says what the bundle's page says"


@pytest.mark.slow
def test_report_job_of_an_unknown_job_is_one_line_and_exit_2(store, pg_url, tmp_path):
    r = run(pg_url, "report", "job", "nowhere", "1", "--out", str(tmp_path / "x.html"))
    assert r.returncode == 2
    assert r.stderr.strip() == "attribution: nowhere/1: no job with a verdict in the store"
    assert not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_report_bad_times_are_exit_2(store, pg_url, tmp_path):
    r = run(pg_url, "report", "job", "kestrel", "90417", "--out", str(tmp_path / "x.html"), "--start", "soon")
    assert r.returncode == 2 and r.stderr.startswith("attribution: --start:") and "Traceback" not in r.stderr
    r = run(pg_url, "report", "fleet", "--out", str(tmp_path / "f"), "--until", "soon")
    assert r.returncode == 2 and r.stderr.startswith("attribution: --until:")
    r = run(pg_url, "report", "fleet", "--out", str(tmp_path / "f"), "--weeks", "0")
    assert r.returncode == 2
