"""The Kueue watcher on a day of workloads (tests/harness/kueueday.py) served by the fake Kubernetes API and the fake
Loki: every failed run is stored once with the verdict tests/data/kueue/day/expected.yaml says (written before the
watcher ran), also when the watcher is killed mid-stream and started again, and after a 410 Gone; the drain plan
names the node of the GPU fault and no other; `backfill --kueue` stores the same runs from a list.

No test waits on a clock: the fake applies the day's next step only when the watcher asks again and its workers
are done (FakeKubeApi.before_step), and the watcher stops at a condition (the fake caught up, or after N changes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.collect.kubeapi import KubeApi
from attribution.config import (ConnectorSettings, KubernetesSettings, KueueWatchSettings, LokiSettings, Settings,
                                WatchSettings)
from attribution.store.kueuewatch import attempts_of, load_bookmark
from attribution.watch.kueue import KueueWatcher, backfill_kueue

from tests.harness import kueueday as day
from tests.harness.kubeapi import FakeKubeApi
from tests.harness.loki import FakeLoki

UTC = timezone.utc
EXPECTED = yaml.safe_load(day.EXPECTED.read_text())


@pytest.fixture
def cluster():
    with FakeKubeApi() as api, FakeLoki() as loki:
        for labels, entries in day.loki_streams():
            loki.add_stream(labels, entries)
        day.initial(api)
        api.timeline = list(day.STEPS)
        yield api, loki


def _settings(api, loki, **watch) -> Settings:
    return Settings(cluster="helios",
                    connectors=ConnectorSettings(loki=LokiSettings(url=loki.url),
                                                 kubernetes=KubernetesSettings(api_server=api.url)),
                    watch=WatchSettings(kueue=KueueWatchSettings(page_size=2, retry_seconds=0.001, watch_seconds=5,
                                                                 **watch)))


def _watch(ruleset, store, api, loki, stop=None, **watch):
    settings = _settings(api, loki, **watch)
    with KubeApi(settings.connectors.kubernetes) as client:
        watcher = KueueWatcher(ruleset, store, settings, client, "helios")
        api.before_step = watcher.wait_idle
        summary = watcher.run(stop=stop or (lambda: api.caught_up))
    return watcher, summary


def _stored(store) -> dict:
    with store.connect() as c:
        rows = c.execute(text(
            "SELECT j.job_id, v.document FROM attribution.jobs j JOIN attribution.verdicts v "
            "ON v.job_id = j.job_id AND v.id = j.current_verdict_id WHERE j.cluster = 'helios'")).all()
    return {job_id: doc if isinstance(doc, dict) else json.loads(doc) for job_id, doc in rows}


def _check(store) -> None:
    verdicts = _stored(store)
    want = {r["job_id"]: r for r in EXPECTED["runs"]}
    assert sorted(verdicts) == sorted(want)
    for job_id, exp in want.items():
        v = verdicts[job_id]
        root = v.get("root_cause")
        got = {"outcome": v["outcome"], "culprits": sorted(c["node"] for c in v["culprits"]),
               "root_cause": {"kind": root["kind"], "node": root["node"]} if root else None}
        assert got == {"outcome": exp["outcome"], "culprits": exp["culprits"], "root_cause": exp["root_cause"]}, \
            job_id
        if "action" in exp:
            assert v["action"] == exp["action"], job_id
    for job_id in EXPECTED["not_stored"]:
        assert job_id not in verdicts
    attempts = attempts_of(store, "helios")
    assert sorted((a["job_id"], a["attempt"]) for a in attempts) == sorted(
        (r["job_id"], r["attempt"]) for r in EXPECTED["runs"])  # each run once


def _drain_plan(store, tmp_path) -> set[str]:
    env = dict(os.environ, ATTRIBUTION_DATABASE_URL=store.url.render_as_string(hide_password=False),
               ATTRIBUTION_HOME=str(tmp_path / "home"))
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "drain", "plan", "--as-of", "2026-03-10T12:00:00Z",
                        "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return {x["node"] for x in json.loads(r.stdout)}


def test_a_watched_day_stores_every_failed_run_once_and_the_drain_plan_names_the_gpu_node(ruleset, store, cluster,
                                                                                          tmp_path):
    api, loki = cluster
    _, summary = _watch(ruleset, store, api, loki)
    _check(store)
    assert summary.lists == 1 and summary.gone == 0
    assert any("dropped" in e for e in summary.errors)  # the "drop" step: watched again from the last version
    assert load_bookmark(store, "helios", "workloads.kueue.x-k8s.io/v1beta2") == str(api.rv)
    continues = [r for r in api.requests if r["query"].get("continue")]
    assert continues and all(r["query"]["limit"] == "2" for r in continues)  # the list came in pages
    watches = [r["query"] for r in api.requests if r["query"].get("watch")]
    assert all(q["allowWatchBookmarks"] == "true" and q["resourceVersion"] for q in watches)
    assert _drain_plan(store, tmp_path) == set(EXPECTED["drain"])


def test_the_gpu_run_is_diagnosed_from_the_pods_logs_and_the_nodes_kernel_in_loki(ruleset, store, cluster):
    api, loki = cluster
    _watch(ruleset, store, api, loki)
    v = _stored(store)["ml-train/pytorchjob-gpt13b-7f3c2"]
    cov = {(c["source"], c["node"], c["status"], c.get("file")) for c in v["coverage"]}
    root = v["root_cause"]
    assert ("job", "hx-gpu019", "ok", "pod/gpt13b-worker-2/pytorch/previous") in cov
    assert ("scheduler", None, "ok", "workload/ml-train/pytorchjob-gpt13b-7f3c2") in cov
    assert root["location"].startswith("loki:") and "Xid" in root["line"] and " 79," in root["line"]


class Killed(Exception):
    """The watcher's process dies here (what it had stored stays; what it had in hand is lost)."""


def test_killed_mid_stream_the_watcher_resumes_from_its_bookmark_without_gaps_or_duplicates(ruleset, store,
                                                                                            cluster):
    api, loki = cluster
    settings = _settings(api, loki, concurrency=1)

    def kill_at_the_gpu_fault():  # the first change of the GPU fault's step: mid-stream
        if w.summary.changes >= 5:
            raise Killed

    with KubeApi(settings.connectors.kubernetes) as client:
        w = KueueWatcher(ruleset, store, settings, client, "helios")
        api.before_step = w.wait_idle
        with pytest.raises(Killed):
            w.run(stop=kill_at_the_gpu_fault)
    assert api.timeline  # the day is not over
    stored_before = len(attempts_of(store, "helios"))
    # the runs of the first two steps (the workers were done before the third began); the GPU run's, handed over
    # just before the kill, may or may not have been started
    assert 3 <= stored_before <= 4
    _, summary = _watch(ruleset, store, api, loki)
    _check(store)
    assert summary.lists == 0  # resumed from the stored bookmark: no list


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-410"])
def test_after_410_gone_the_watcher_lists_again_and_misses_nothing(ruleset, store, cluster, as_http):
    api, loki = cluster
    settings = _settings(api, loki)
    with KubeApi(settings.connectors.kubernetes) as client:
        w = KueueWatcher(ruleset, store, settings, client, "helios")
        api.before_step = w.wait_idle
        # stopped once the preemption's step is handled (its bookmark seen, the workers done)
        w.run(stop=lambda: w.summary.bookmarks >= 2)
    assert api.timeline[0] is day.step_gpu_and_requeue
    # while it is down: the rest of the day happens and the history is compacted
    for step in [s for s in api.timeline if callable(s)]:
        step(api)
    api.timeline = []
    api.compact()
    api.gone_as_http = as_http
    _, summary = _watch(ruleset, store, api, loki)
    assert summary.gone == 1 and summary.lists == 1
    _check(store)


def test_backfill_stores_the_failed_runs_the_api_server_holds_once(ruleset, store, cluster):
    api, loki = cluster
    for step in [s for s in api.timeline if callable(s)][:-1]:  # the whole day but the clean job's deletion
        step(api)
    api.timeline = []
    settings = _settings(api, loki)
    since, until = datetime(2026, 3, 10, tzinfo=UTC), datetime(2026, 3, 11, tzinfo=UTC)
    with KubeApi(settings.connectors.kubernetes) as client:
        s = backfill_kueue(ruleset, store, settings, client, "helios", since, until)
        again = backfill_kueue(ruleset, store, settings, client, "helios", since, until)
    # what the API server holds now: the sweep's preempted first run was requeued (its Evicted condition is gone);
    # its second is still the second (Kueue counted the eviction)
    assert sorted(r.job_id for r in s.runs) == sorted(r["job_id"] for r in EXPECTED["runs"]
                                                      if r["job_id"] != "team-b/job-sweep-71e3a")
    assert again.outcomes == {"already stored": len(s.runs)}


def test_backfill_kueue_from_the_command_line(store, cluster, tmp_path):
    api, loki = cluster
    day.step_clean_and_tokenizer(api)
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False),
           "ATTRIBUTION_HOME": str(tmp_path / "home")}
    args = ["backfill", "--kueue", "--since", "2026-03-10", "--until", "2026-03-11", "--cluster", "helios"]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"connectors": {"kubernetes": {"api_server": api.url}}}))
    r = CliRunner().invoke(main, ["--config", str(cfg), *args], env=env)
    assert r.exit_code == 0, r.output
    assert "1 failed run(s)" in r.output and "1 application" in r.output
    assert sorted(_stored(store)) == ["team-a/job-tokenizer-4b7e1"]
