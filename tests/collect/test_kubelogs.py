"""collect/kubelogs.py: `kubectl logs --timestamps --prefix` (and `--previous`) for every container of a workload's
pods, through a fake kubectl serving recorded outputs (tests/harness/kubectl.py, tests/data/kueue)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from attribution.cli import main
from attribution.collect.kubelogs import collect_pod_logs, logs_argv
from attribution.config import KubernetesSettings
from attribution.scope.kueue import PodPlacement, workload_context

from tests.conftest import INCIDENTS, ROOT
from tests.harness import kubectl as fake_kubectl
from tests.harness.prefilters import AllLines

UTC = timezone.utc
DATA = ROOT / "tests" / "data" / "kueue" / "gpt13b-xid79"
REF = "ml-train/pytorchjob-gpt13b-7f3c2"


@pytest.fixture
def kubectl(tmp_path):
    return fake_kubectl.install(tmp_path / "bin", DATA)


@pytest.fixture
def workload():
    return workload_context(json.loads((DATA / "workload.json").read_text()),
                            json.loads((DATA / "pods.json").read_text()), "helios")


def _calls(kubectl):
    return [json.loads(line) for line in (kubectl.parent / "calls.log").read_text().splitlines()]


def test_the_logs_command_asks_for_timestamps_and_prefix():
    s = KubernetesSettings(kubectl="k", kubeconfig="/etc/kube.conf", context="prod")
    assert logs_argv(s, "ns", "p", "c", True) == ["k", "--kubeconfig=/etc/kube.conf", "--context=prod", "logs", "-n",
                                                  "ns", "p", "-c", "c", "--timestamps", "--prefix", "--previous"]


def test_every_container_and_the_previous_instance_of_a_restarted_one(kubectl, workload):
    s = KubernetesSettings(kubectl=str(kubectl))
    obs, cov = collect_pod_logs(s, "ml-train", workload.pods, workload.context, AllLines(), time.monotonic() + 30)
    assert [(c.file, c.node, c.status) for c in cov] == [
        ("pod/gpt13b-worker-0/pytorch", "hx-gpu017", "ok"), ("pod/gpt13b-worker-1/pytorch", "hx-gpu018", "ok"),
        ("pod/gpt13b-worker-2/pytorch", "hx-gpu019", "ok"), ("pod/gpt13b-worker-2/pytorch/previous", "hx-gpu019", "ok"),
        ("pod/gpt13b-worker-3/pytorch", "hx-gpu020", "ok")]
    assert sum(c.lines for c in cov) == 914 + 3
    first = obs[0]
    assert first.text.startswith("Job 731842 running on") and first.node == "hx-gpu017"
    assert first.time == datetime(2026, 3, 10, 8, 2, 12, tzinfo=UTC)
    assert first.location == "pod/gpt13b-worker-0/pytorch:1"
    rank20 = [o for o in obs if o.rank == 20]
    assert rank20 and {o.node for o in rank20} == {"hx-gpu019"}
    assert all(o.time is not None for o in obs)


def test_a_container_without_a_previous_instance_is_missing_not_an_error(kubectl, workload):
    pods = [PodPlacement("gpt13b-worker-0", "hx-gpu017", ("pytorch",), frozenset({"pytorch"}))]
    _, cov = collect_pod_logs(KubernetesSettings(kubectl=str(kubectl)), "ml-train", pods, workload.context, AllLines(),
                              time.monotonic() + 30)
    assert [c.status for c in cov] == ["ok", "missing"]
    assert "previous terminated container" in cov[1].reason


def test_a_hung_kubectl_is_cut_off(kubectl, workload, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_SLEEP", "30")
    s = KubernetesSettings(kubectl=str(kubectl), timeout=0.5)
    t = time.monotonic()
    obs, cov = collect_pod_logs(s, "ml-train", workload.pods[:1], workload.context, AllLines(), time.monotonic() + 30)
    assert time.monotonic() - t < 3
    assert obs == [] and cov[0].status == "error" and "no answer within 0.5 s" in cov[0].reason


def test_the_budget_bounds_all_calls(kubectl, workload, monkeypatch):
    monkeypatch.setenv("FAKE_KUBECTL_SLEEP", "30")
    s = KubernetesSettings(kubectl=str(kubectl), timeout=10)
    t = time.monotonic()
    _, cov = collect_pod_logs(s, "ml-train", workload.pods, workload.context, AllLines(), time.monotonic() + 1)
    assert time.monotonic() - t < 4
    assert all(c.status == "error" for c in cov) and "time budget exhausted" in cov[-1].reason


def test_no_kubectl_is_a_coverage_error(workload):
    _, cov = collect_pod_logs(KubernetesSettings(kubectl="/nonexistent/kubectl"), "ml-train", workload.pods[:1],
                              workload.context, AllLines(), time.monotonic() + 5)
    assert cov[0].status == "error" and "command not found" in cov[0].reason


def test_diagnose_a_kueue_workload_from_the_command_line(kubectl):
    r = CliRunner().invoke(main, ["diagnose", "--kueue-workload", REF, "--kubectl", str(kubectl), "--cluster", "helios",
                                  "--files", f"kernel={INCIDENTS}/01-xid79-fallen-off-bus/nodes/$node/kernel.log",
                                  "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["job"]["job_id"] == REF and doc["outcome"] == "gpu_hardware"
    assert doc["culprits"] == [{"node": "hx-gpu019", "gpu": "0000:9d:00", "evidence": "system"}]
    calls = _calls(kubectl)
    assert calls[0] == ["get", "workloads.kueue.x-k8s.io", "-n", "ml-train", "pytorchjob-gpt13b-7f3c2", "-o", "json"]
    assert calls[1] == ["get", "pods", "-n", "ml-train", "-l", "training.kubeflow.org/job-name=gpt13b", "-o", "json"]


def test_without_pod_logs_the_placement_still_comes_from_the_pods(kubectl):
    r = CliRunner().invoke(main, ["diagnose", "--kueue-workload", REF, "--kubectl", str(kubectl), "--no-pod-logs",
                                  "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["job"]["nodes"] == ["hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020"]
    assert doc["outcome"] == "unknown"  # FAILED, and no evidence at all
    assert any(c["source"] == "kernel" and c["status"] == "missing" for c in doc["coverage"])


@pytest.mark.parametrize("ref,message", [("nonsense", "expected NAMESPACE/NAME"),
                                         ("ml-train/other", 'workloads.kueue.x-k8s.io "other" not found')])
def test_a_bad_or_unknown_workload_is_bad_input(kubectl, ref, message):
    r = CliRunner().invoke(main, ["diagnose", "--kueue-workload", ref, "--kubectl", str(kubectl)])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
