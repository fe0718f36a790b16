"""pipeline.py with the connectors: one incident (tests/incidents/01-xid79-fallen-off-bus: a GPU of hx-gpu019 fell
off the bus, NCCL timeouts on every node) served from files, from Loki and from kubectl pod logs gives the verdict
its expected.yaml says; a job whose only hardware evidence is a DCGM Xid in Prometheus is attributed to the right
node and GPU; and a Loki or Prometheus that is down, slow or failing leaves a verdict with that source marked in
coverage, within a bounded time."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.config import (ConnectorSettings, FileSourceSettings, KubernetesSettings, LokiSettings,
                                PrometheusSettings)
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.live import diagnose_kueue_workload, diagnose_static

from tests.conftest import INCIDENTS, ROOT
from tests.harness import kubectl as fake_kubectl
from tests.harness.incident_sources import bundle_streams, dcgm_history
from tests.harness.loki import Blackhole, FakeLoki
from tests.harness.receiver import failing, secret_file
from tests.harness.prometheus import PrometheusHarnessError, PrometheusServer, openmetrics

UTC = timezone.utc
XID79 = INCIDENTS / "01-xid79-fallen-off-bus"
KUEUE = ROOT / "tests" / "data" / "kueue" / "gpt13b-xid79"
KERNEL_FILES = FileSourceSettings(path=str(XID79 / "nodes" / "$node" / "kernel.log"), source="kernel")
JOB_FILES = FileSourceSettings(path=str(XID79 / "job" / "*.out"), source="job")


def _verdict_key(v):
    root = v.root_cause
    return {"outcome": v.outcome, "action": v.action,
            "root": (root.kind, root.code, root.node, root.gpu) if root else None,
            "culprits": list(v.culprits),
            "symptom_kinds": sorted({(s.event.kind, s.event.node) for s in v.symptoms})}


@pytest.fixture(scope="module")
def reference(ruleset):
    v = diagnose_bundle(ruleset, XID79).verdict
    expected = yaml.safe_load((XID79 / "expected.yaml").read_text())
    assert v.outcome == expected["outcome"]
    assert [n for n, _ in v.culprits] == expected["culprits"]
    assert (v.root_cause.kind, v.root_cause.node) == (expected["root_cause"]["kind"], expected["root_cause"]["node"])
    return _verdict_key(v)


def test_from_local_files(ruleset, reference):
    d = diagnose_static(ruleset, ConnectorSettings(files=(KERNEL_FILES, JOB_FILES)), XID79 / "context.yaml")
    assert _verdict_key(d.verdict) == reference
    assert {c.status for c in d.coverage} == {"ok"}


@pytest.mark.parametrize("limit,direction", [(5000, "forward"), (50, "forward"), (50, "backward")])
def test_from_loki(ruleset, reference, limit, direction):
    with FakeLoki() as loki:
        for labels, entries in bundle_streams(XID79):
            loki.add_stream(labels, entries)
        c = ConnectorSettings(loki=LokiSettings(url=loki.url, limit=limit, direction=direction))
        d = diagnose_static(ruleset, c, XID79 / "context.yaml")
        pages = len(loki.requests)
    assert _verdict_key(d.verdict) == reference
    job = next(c for c in d.coverage if c.source == "job")
    assert job.status == "ok" and job.lines == 914 and not job.notes
    assert pages > 914 // limit
    assert d.verdict.root_cause.location.startswith('loki:{filename="/var/log/kernel.log", host="hx-gpu019"')


def test_from_kubectl_pod_logs(ruleset, reference, tmp_path):
    exe = fake_kubectl.install(tmp_path / "bin", KUEUE)
    c = ConnectorSettings(files=(KERNEL_FILES,), kubernetes=KubernetesSettings(kubectl=str(exe)))
    d = diagnose_kueue_workload(ruleset, c, "ml-train/pytorchjob-gpt13b-7f3c2", "helios")
    assert _verdict_key(d.verdict) == reference
    pods = sorted(c.file for c in d.coverage if c.source == "job")
    assert pods == ["pod/gpt13b-worker-0/pytorch", "pod/gpt13b-worker-1/pytorch", "pod/gpt13b-worker-2/pytorch",
                    "pod/gpt13b-worker-2/pytorch/previous", "pod/gpt13b-worker-3/pytorch"]
    assert d.context.job_id == "ml-train/pytorchjob-gpt13b-7f3c2" and d.context.scheduler == "kueue"


# -- a DCGM Xid in Prometheus as the only hardware evidence --------------------------------------------------------


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    nodes = ("hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020")
    history = dcgm_history(nodes, datetime(2026, 3, 10, 7, 30, tzinfo=UTC), datetime(2026, 3, 10, 9, 45, tzinfo=UTC),
                           xid_at={("hx-gpu019", 4): (datetime(2026, 3, 10, 9, 14, 44, tzinfo=UTC), 79)},
                           stuck={("hx-gpu017", 2): 48},  # an Xid 48 from last week, still shown
                           dbe_at={("hx-gpu018", 1): (datetime(2026, 3, 10, 7, 30, tzinfo=UTC), 2)})
    server = PrometheusServer(tmp_path_factory.mktemp("prom"), openmetrics(history))
    try:
        server.install()
    except PrometheusHarnessError as exc:
        pytest.skip(str(exc))
    server.start()
    yield server
    server.stop()


@pytest.mark.prometheus
def test_a_dcgm_xid_increase_is_attributed_to_its_node_and_gpu(ruleset, prom):
    without = diagnose_static(ruleset, ConnectorSettings(files=(JOB_FILES,)), XID79 / "context.yaml").verdict
    assert without.outcome == "unknown" and without.root_cause is None  # NCCL timeouts alone

    c = ConnectorSettings(files=(JOB_FILES,), prometheus=PrometheusSettings(url=prom.url, step=15))
    d = diagnose_static(ruleset, c, XID79 / "context.yaml")
    v = d.verdict
    assert (v.outcome, v.action) == ("gpu_hardware", "drain_node")
    r = v.root_cause
    assert (r.kind, r.code, r.node, r.gpu, r.source) == ("gpu_fallen_off_bus", 79, "hx-gpu019", "0000:9d:00", "metrics")
    assert r.fields["gpu_index"] == "4"
    # seen at the first query step after the scrape that carried it (30 s scrapes, 15 s steps)
    assert datetime(2026, 3, 10, 9, 14, 44, tzinfo=UTC) <= r.time <= datetime(2026, 3, 10, 9, 15, 15, tzinfo=UTC)
    assert v.culprits == (("hx-gpu019", "0000:9d:00"),)
    metric_events = [e for e in d.events if e.source == "metrics"]
    assert len(metric_events) == 1  # the stuck Xid 48 and the old DBE count are baselines, not events
    watchdogs = [s for s in v.symptoms if s.event.kind == "nccl_watchdog_timeout"]
    assert watchdogs and all(s.explained_by == "root_cause" for s in watchdogs if s.event.time is None)
    assert {c.status for c in v.coverage if c.source == "metrics"} == {"ok"}


# -- Loki and Prometheus down, slow, or answering with errors --------------------------------------------------------


def _context_file(tmp_path: Path) -> Path:
    p = tmp_path / "context.yaml"
    p.write_text((XID79 / "context.yaml").read_text())
    return p


def _run_cli(tmp_path, *flags):
    args = ["diagnose", "--context", str(_context_file(tmp_path)), "--json", "--connector-timeout", "1",
            "--files", f"kernel={XID79}/nodes/$node/kernel.log", "--files", f"job={XID79}/job/*.out", *flags]
    t = time.monotonic()
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r, time.monotonic() - t


@pytest.mark.parametrize("failure", ["down", "hung", "slow", "error"])
@pytest.mark.parametrize("server", ["loki", "prometheus"])
def test_a_failing_server_leaves_a_verdict_with_its_coverage_marked(tmp_path, reference, server, failure):
    flag = "--loki-url" if server == "loki" else "--prometheus-url"
    source = "kernel" if server == "loki" else "metrics"
    if failure in ("down", "hung"):
        with Blackhole() as hole:
            if failure == "hung":
                r, took = _run_cli(tmp_path, flag, hole.url)
        if failure == "down":
            r, took = _run_cli(tmp_path, flag, hole.url)
    else:
        fake = FakeLoki(delay=5) if failure == "slow" else FakeLoki(fail_with=(503, "too many outstanding requests"))
        with fake:
            r, took = _run_cli(tmp_path, flag, fake.url.replace("/loki", ""))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert took < 8
    assert doc["outcome"] == reference["outcome"] and doc["root_cause"]["node"] == "hx-gpu019"
    marked = [c for c in doc["coverage"] if c["source"] == source and c["status"] == "error"
              and (c.get("file") or "").startswith(server)]
    assert len(marked) == 4, doc["coverage"]  # one per node
    reason = marked[0]["reason"]
    want = {"down": "connection refused", "hung": "within 1.0 s", "slow": "within 1.0 s",
            "error": "HTTP 503" if server == "loki" else "HTTP 404"}[failure]
    assert want in reason


@pytest.mark.parametrize("failure", ["refused", "500", "timeout"])
@pytest.mark.parametrize("server", ["loki", "prometheus"])
def test_a_token_from_a_file_is_in_no_coverage_reason_nor_output(tmp_path, server, failure):
    """Loki or Prometheus refusing, answering 500 with the request echoed (its Authorization header too), or not
    answering in time: the verdict's coverage says which, and the bearer token read from token_file is nowhere in
    what `diagnose` prints (the coverage reasons are what the store would keep)."""
    token = "glsa_Zm9vYmFyYmF6cXV4X3NlY3JldF90b2tlbl8xMjM0"
    token_file = secret_file(tmp_path, "token", token)
    with failing(failure, ["/loki/api/v1/query_range", "/api/v1/query_range"]) as (url, _):
        config = tmp_path / "config.yaml"
        config.write_text(json.dumps({"connectors": {server: {"url": url, "token_file": token_file}}}))
        r = CliRunner().invoke(main, ["--config", str(config), "diagnose", "--context", str(_context_file(tmp_path)),
                                      "--json", "--connector-timeout", "1", "--files",
                                      f"kernel={XID79}/nodes/$node/kernel.log"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    source = "kernel" if server == "loki" else "metrics"
    [reason, *_] = [c["reason"] for c in json.loads(r.stdout)["coverage"]
                    if c["source"] == source and c["status"] == "error" and c["file"].startswith(server)]
    assert {"refused": "connection refused", "500": "HTTP 500", "timeout": "within 1.0 s"}[failure] in reason
    if failure == "500":
        assert "[secret]" in reason  # the server did echo it
    assert token not in r.stdout + r.stderr and token[5:25] not in r.stdout + r.stderr


@pytest.mark.prometheus
def test_a_metric_root_cause_survives_the_store(ruleset, prom, store):
    from attribution.pipeline.ingest import ingest

    c = ConnectorSettings(files=(JOB_FILES,), prometheus=PrometheusSettings(url=prom.url, step=15))
    d = diagnose_static(ruleset, c, XID79 / "context.yaml")
    result, verdict = ingest(ruleset, store, d.context, list(d.events), list(d.coverage), source="sacct")
    assert result.verdict_changed and verdict.root_cause.source == "metrics"  # re-attributed from the stored events
    assert (verdict.root_cause.node, verdict.root_cause.gpu, verdict.root_cause.kind) == (
        "hx-gpu019", "0000:9d:00", "gpu_fallen_off_bus")
    again, _ = ingest(ruleset, store, d.context, list(d.events), list(d.coverage), source="sacct")
    assert again.new_events == 0 and not again.verdict_changed


@pytest.mark.parametrize("args,message", [
    ([], "give exactly one of"),
    ([str(XID79), "--slurm-job", "1"], "give exactly one of"),
    ([str(XID79), "--loki-url", "http://loki:3100"], "connector flags go with"),
    (["--context", str(XID79 / "context.yaml"), "--files", "dmesg=/x"], "SOURCE=PATH"),
    (["--context", str(XID79 / "context.yaml"), "--loki-url", "loki:3100"], "connectors.loki.url"),
])
def test_usage_mistakes_are_exit_2_with_one_clear_line(args, message):
    r = CliRunner().invoke(main, ["diagnose", *args])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
