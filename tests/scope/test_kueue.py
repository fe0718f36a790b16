"""kueue.py: a Workload and its pods (recorded kubectl JSON in tests/data/kueue) to an execution context."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest

from attribution.errors import InputError
from attribution.scope.kueue import parse_workload_ref, pod_selector, tas_hostnames, workload_context

from tests.conftest import ROOT

UTC = timezone.utc
DATA = ROOT / "tests" / "data" / "kueue" / "gpt13b-xid79"
NODES = ("hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020")


@pytest.fixture
def workload():
    return json.loads((DATA / "workload.json").read_text())


@pytest.fixture
def pods():
    return json.loads((DATA / "pods.json").read_text())


def _cond(wl, type_, reason, status="True", at="2026-03-10T09:24:57Z"):
    conds = [c for c in wl["status"]["conditions"] if c["type"] not in (type_, "Finished")]
    conds.append({"type": type_, "status": status, "reason": reason, "lastTransitionTime": at, "message": ""})
    wl["status"]["conditions"] = conds
    return wl


def test_placement_window_and_state_of_a_failed_pytorchjob(workload, pods):
    w = workload_context(workload, pods, "helios")
    c = w.context
    assert (w.namespace, w.name, w.owner_kind, w.owner_name) == ("ml-train", "pytorchjob-gpt13b-7f3c2", "PyTorchJob",
                                                                 "gpt13b")
    assert c.nodes == NODES  # in replica-index order, although kubectl listed them by another order
    assert [p.name for p in w.pods] == [f"gpt13b-worker-{i}" for i in range(4)]
    assert c.start == datetime(2026, 3, 10, 8, 2, 11, tzinfo=UTC)  # Admitted
    assert c.end == datetime(2026, 3, 10, 9, 24, 57, tzinfo=UTC)  # Finished
    assert (c.state, c.exit_code, c.partition, c.gpus_per_node) == ("FAILED", "134:0", "gpu-cq", 8)
    assert (c.scheduler, c.cluster, c.job_id) == ("kueue", "helios", "ml-train/pytorchjob-gpt13b-7f3c2")
    assert w.pods[2].restarted == frozenset({"pytorch"}) and not w.pods[0].restarted


def test_without_pods_the_topology_assignment_names_the_nodes(workload):
    w = workload_context(workload, None, "helios")
    assert w.context.nodes == NODES and w.pods == ()


def test_v1beta2_slices_name_nodes_too(workload):
    wl = copy.deepcopy(workload)
    psa = wl["status"]["admission"]["podSetAssignments"][0]
    psa["topologyAssignment"] = {
        "levels": ["cloud.provider.com/topology-block", "kubernetes.io/hostname"],
        "slices": [{"domainCount": 4,
                    "valuesPerLevel": [{"universal": "block-h7"},
                                       {"individual": {"prefix": "hx-gpu0", "roots": ["17", "18", "19", "20"]}}],
                    "podCounts": {"universal": 1}}]}
    assert tas_hostnames(wl["status"]["admission"]) == list(NODES)


def test_no_placement_at_all_is_bad_input(workload):
    wl = copy.deepcopy(workload)
    wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["levels"] = ["rack"]
    with pytest.raises(InputError, match="no node placement"):
        workload_context(wl, {"kind": "List", "items": []}, "c")


@pytest.mark.parametrize("type_,reason,state", [
    ("Finished", "Succeeded", "COMPLETED"), ("Evicted", "Preempted", "PREEMPTED"),
    ("Evicted", "NodeFailures", "NODE_FAIL"), ("Evicted", "MaximumExecutionTimeExceeded", "TIMEOUT"),
    ("Evicted", "Deactivated", "CANCELLED"), ("Evicted", "PodsReadyTimeout", "FAILED")])
def test_states_from_the_conditions(workload, pods, type_, reason, state):
    c = workload_context(_cond(copy.deepcopy(workload), type_, reason), pods, "c").context
    assert c.state == state
    assert c.end == datetime(2026, 3, 10, 9, 24, 57, tzinfo=UTC)


def test_an_oom_killed_container_makes_the_job_out_of_memory(workload, pods):
    p = copy.deepcopy(pods)
    p["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"].update(reason="OOMKilled", exitCode=137)
    assert workload_context(workload, p, "c").context.state == "OUT_OF_MEMORY"


def test_a_running_workload_has_no_end_yet(workload):
    wl = copy.deepcopy(workload)
    wl["status"]["conditions"] = [c for c in wl["status"]["conditions"] if c["type"] != "Finished"]
    c = workload_context(wl, None, "c").context
    assert c.state == "RUNNING" and c.end is None


def test_unhealthy_nodes_name_the_failed_node(workload, pods):
    wl = copy.deepcopy(workload)
    wl["status"]["unhealthyNodes"] = [{"name": "hx-gpu019"}]
    assert workload_context(wl, pods, "c").context.failed_node == "hx-gpu019"


def test_refs_and_selectors():
    assert parse_workload_ref("ns/name") == ("ns", "name")
    for bad in ("name", "/x", "ns/", "a/b/c"):
        with pytest.raises(InputError):
            parse_workload_ref(bad)
    sel = {"PyTorchJob": "training.kubeflow.org/job-name=$name"}
    assert pod_selector("PyTorchJob", "gpt13b", sel) == "training.kubeflow.org/job-name=gpt13b"
    assert pod_selector("RayJob", "x", sel) is None and pod_selector(None, None, sel) is None


def test_not_a_workload_is_refused():
    with pytest.raises(InputError, match="Workload"):
        workload_context({"kind": "Pod"}, None, "c")


def test_the_job_name_is_the_owner_s_name_else_the_workload_s(workload, pods):
    """The Workload pytorchjob-gpt13b-7f3c2 belongs to the PyTorchJob gpt13b: a resubmitted gpt13b gets a new
    workload name but keeps that one."""
    assert workload_context(workload, pods, "helios").context.job_name == "gpt13b"
    del workload["metadata"]["ownerReferences"]
    assert workload_context(workload, pods, "helios").context.job_name == "pytorchjob-gpt13b-7f3c2"
