"""`attribution alerts send` against a local HTTP receiver playing a JSON webhook, Slack and Alertmanager: one
alert per new infrastructure verdict and drain decision, none twice, one per key within the cooldown, and a
failed delivery tried again on the next run."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.config.alerts import parse_alerts
from attribution.errors import ConfigError
from attribution.pipeline.ingest import ingest_bundle
from attribution.store.drain import record_resume

from tests.conftest import INCIDENTS


class Receiver:
    """A local HTTP server that keeps every JSON body posted to it, by path; paths in `failing` answer 500."""

    def __init__(self) -> None:
        self.posts: dict[str, list] = {}
        self.failing: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path in receiver.failing:
                    self.send_response(500)
                else:
                    receiver.posts.setdefault(self.path, []).append(body)
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


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


def test_a_failed_delivery_is_tried_again_next_run(ruleset, store, receiver, configured):
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    receiver.failing.add("/slack")
    r = _send(configured)
    assert r.exit_code == 3 and "slack" in r.output and "HTTP 500" in r.output
    receiver.failing.clear()
    r = _send(configured)
    assert r.exit_code == 0, r.output
    assert len(receiver.posts["/slack"]) == 1
    assert len(receiver.posts["/hook"]) == 2  # the webhook had taken it before slack failed: sent twice


def test_the_alerts_section_is_checked_with_the_file_named():
    with pytest.raises(ConfigError, match=r"conf.yaml: alerts.sinks\[0\]: give exactly one of url"):
        parse_alerts({"sinks": [{"type": "webhook"}]}, "conf.yaml")
    with pytest.raises(ConfigError, match=r"conf.yaml: alerts.sinks\[0\].type"):
        parse_alerts({"sinks": [{"type": "pager", "url": "http://x"}]}, "conf.yaml")
    with pytest.raises(ConfigError, match=r"conf.yaml: unknown setting\(s\) in 'alerts': colldown"):
        parse_alerts({"colldown": 5}, "conf.yaml")
