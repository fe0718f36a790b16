"""`attribution alerts send` against local HTTP receivers playing a JSON webhook, Slack and Alertmanager: one
alert per new infrastructure verdict and drain decision, none twice, one per key within the cooldown, and a sink
that is down for several runs gets what it missed once it is back, while the others get each alert once."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.pipeline.ingest import ingest_bundle
from attribution.store.drain import record_resume

from tests.conftest import INCIDENTS
from tests.harness.receiver import Receiver, secret_file


@pytest.fixture
def configured(store, receiver, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "database": {"url": store.url.render_as_string(hide_password=False)},
        "alerts": {"cooldown_seconds": 3600, "dashboard_url": "https://attribution.example/ui",
                   "sinks": [{"type": "webhook", "url": receiver.url + "/hook"},
                             {"type": "slack", "url": receiver.url + "/slack"},
                             {"type": "alertmanager", "url": receiver.url + "/am", "events": ["verdict"]}]}}))
    return ["--config", str(config)]


def _send(args):
    return CliRunner().invoke(main, [*args, "alerts", "send"])


def test_each_new_infrastructure_verdict_alerts_once_on_every_sink(ruleset, store, receiver, configured):
    for name in ("01-xid79-fallen-off-bus", "04-xid74-nvlink", "07-app-python-keyerror"):
        ingest_bundle(ruleset, store, INCIDENTS / name)
    r = _send(configured)
    assert r.exit_code == 0, r.output
    hooks = receiver.posts["/hook"]
    assert sorted(h["labels"]["outcome"] for h in hooks) == ["gpu_hardware", "nvlink"]  # not the application one
    nvlink = next(h for h in hooks if h["labels"]["outcome"] == "nvlink")
    assert nvlink["labels"]["node"] == "kes-n203" and nvlink["details"]["job_id"] == "90417"
    assert nvlink["link"] == "https://attribution.example/ui/jobs/kestrel/90417"
    assert len(receiver.posts["/slack"]) == 2 and all("text" in s for s in receiver.posts["/slack"])
    am = receiver.posts["/am/api/v2/alerts"]
    assert len(am) == 2 and {a[0]["labels"]["alertname"] for a in am} == {"AttributionInfrastructureVerdict"}
    assert _send(configured).exit_code == 0
    assert len(receiver.posts["/hook"]) == 2  # nothing new: nothing sent again


def test_a_second_job_failing_on_the_same_node_and_fault_is_within_the_cooldown(ruleset, store, receiver,
                                                                                configured, tmp_path):
    ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
    assert _send(configured).exit_code == 0
    again = tmp_path / "again"
    shutil.copytree(INCIDENTS / "04-xid74-nvlink", again)
    ctx = yaml.safe_load((again / "context.yaml").read_text())
    ctx["job_id"] = "90418"
    (again / "context.yaml").write_text(yaml.safe_dump(ctx))
    ingest_bundle(ruleset, store, again)
    r = _send(configured)
    assert r.exit_code == 0 and "1 within their cooldown" in r.output
    assert len(receiver.posts["/hook"]) == 1


def test_a_verdict_whose_culprit_only_job_output_names_says_so(ruleset, store, receiver, configured, tmp_path):
    """A job printing srun's node-failure line makes a host verdict resting on job output (issue 18, H1): its
    alert says the job's owner could have written what names the node."""
    from datetime import datetime, timedelta, timezone

    b = tmp_path / "forged"
    (b / "job").mkdir(parents=True)
    end = datetime.now(timezone.utc).replace(microsecond=0)
    (b / "context.yaml").write_text(json.dumps({
        "scheduler": "slurm", "cluster": "prod", "job_id": "9001", "user": "mallory", "state": "FAILED",
        "exit_code": "1:0", "nodes": ["gpu007", "gpu008"], "start": (end - timedelta(hours=1)).isoformat(),
        "end": end.isoformat()}))
    (b / "job" / "slurm-9001.out").write_text("srun: error: Node failure on gpu008\n")
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    ingest_bundle(ruleset, store, b)
    assert _send(configured).exit_code == 0
    hooks = {h["details"]["job_id"]: h for h in receiver.posts["/hook"]}
    forged = hooks["9001"]
    assert forged["labels"]["outcome"] == "host" and forged["labels"]["evidence"] == "job_output"
    assert forged["details"]["culprit_evidence"] == ["job_output"]
    assert forged["summary"].endswith("named by job output only")
    real = next(h for job, h in hooks.items() if job != "9001")
    assert real["labels"]["evidence"] == "system" and "job output" not in real["summary"]


def test_drain_decisions_alert_where_the_sink_wants_them(ruleset, store, receiver, configured):
    record_resume(store, "kestrel", "kes-n203", actor="ops", detail="GPU replaced")
    assert _send(configured).exit_code == 0
    assert [h["labels"] for h in receiver.posts["/hook"]] == [
        {"cluster": "kestrel", "node": "kes-n203", "decision": "resumed"}]
    assert "/am/api/v2/alerts" not in receiver.posts  # that sink takes verdicts only


def test_a_failed_delivery_is_tried_again_next_run_to_that_sink_only(ruleset, store, receiver, configured):
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    receiver.failing.add("/slack")
    r = _send(configured)
    assert r.exit_code == 3 and "slack (slack, http://127.0.0.1:" in r.output and "HTTP 500" in r.output
    assert "attempt 1 of 10" in r.output and "again in 60 s" in r.output and "still owed: 1 to slack" in r.output
    receiver.failing.clear()
    r = _send(configured)  # within the minute the sink is to wait: not tried yet
    assert r.exit_code == 0 and receiver.hits["/slack"] == 1 and "still owed: 1 to slack" in r.output
    assert len(receiver.posts["/hook"]) == 1  # the webhook had taken it: never sent again


def _secret_config(store, tmp_path, hook: Receiver, slack: Receiver, am: Receiver, **alerts) -> tuple[list, str,
                                                                                                    str]:
    """A configuration whose Slack URL and webhook token are secrets in owner-only files."""
    slack_url = f"{slack.url}/services/T0AB12CD3/B0EF45GH6/s3cr3tW3bh00kPathXyZ"
    token = "tok-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    url_file, token_file = secret_file(tmp_path, "slack-url", slack_url), secret_file(tmp_path, "hook-token", token)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "database": {"url": store.url.render_as_string(hide_password=False)},
        "alerts": {"cooldown_seconds": 3600, **alerts,
                   "sinks": [{"type": "webhook", "url": hook.url + "/hook", "token_file": token_file},
                             {"type": "slack", "url_file": url_file},
                             {"type": "alertmanager", "url": am.url}]}}))
    return ["--config", str(config)], slack_url, token


def test_one_sink_down_for_four_runs_misses_nothing_and_the_others_get_each_alert_once(ruleset, store, tmp_path):
    """Issue 29's case: of three sinks, Slack is down (its port closed) for four runs, with a new alert arriving
    between the second and the third. The webhook and Alertmanager get each alert once, the later alert is sent
    to them at once, Slack gets both once it is back, and no run prints the Slack URL or the webhook's token."""
    hook, slack, am = Receiver(), Receiver(), Receiver()
    try:
        args, slack_url, token = _secret_config(store, tmp_path, hook, slack, am, retry_seconds=0)
        slack.stop()
        ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
        outputs = []
        for run in range(4):
            if run == 2:
                ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
            r = _send(args)
            outputs.append(r.stdout + r.stderr + repr(r.exception))
            assert r.exit_code == 3, r.output
            assert "slack (slack, url_file " in r.stderr and "ConnectError" in r.stderr, r.stderr
            # the oldest alert Slack is owed is tried once per run; the run tries Slack no further after it fails
            assert f"attempt {run + 1} of 10" in r.stderr and r.stderr.count("ConnectError") == 1, r.stderr
            assert f"still owed: {1 if run < 2 else 2} to slack" in r.stderr, r.stderr
        kinds = lambda posts: [p["labels"]["outcome"] for p in posts]  # noqa: E731
        assert kinds(hook.posts["/hook"]) == ["gpu_hardware", "nvlink"]
        assert [a[0]["labels"]["outcome"] for a in am.posts["/api/v2/alerts"]] == ["gpu_hardware", "nvlink"]
        assert "sent nvlink on kestrel/kes-n203" in outputs[2]  # the later alert was not held back
        slack.start()
        r = _send(args)
        outputs.append(r.stdout + r.stderr + repr(r.exception))
        assert r.exit_code == 0, r.output
        texts = [p["text"] for p in slack.posts["/services/T0AB12CD3/B0EF45GH6/s3cr3tW3bh00kPathXyZ"]]
        assert len(texts) == 2 and texts[0].startswith("gpu_hardware on ") and texts[1].startswith("nvlink on ")
        assert "(to slack)" in r.stdout and "webhook" not in r.stdout  # only what Slack was owed
        r = _send(args)
        assert r.exit_code == 0 and r.stdout == "" and "still owed" not in r.stderr
        assert len(hook.posts["/hook"]) == 2 and len(am.posts["/api/v2/alerts"]) == 2 and slack.hits == {
            "/services/T0AB12CD3/B0EF45GH6/s3cr3tW3bh00kPathXyZ": 2}
        assert hook.headers["/hook"][0]["Authorization"] == f"Bearer {token}"  # the token was used, and
        for out in outputs:  # ... neither it nor the URL (nor its path) was ever printed
            assert "s3cr3tW3bh00k" not in out and token not in out and "T0AB12CD3" not in out, out
    finally:
        for r in (hook, slack, am):
            r.close()
