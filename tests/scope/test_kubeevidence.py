"""scope/kubeevidence.py with the rules of rules/kubernetes.yaml: what the control plane says about a run becomes
events on the right node at the right time, and what it says outside the run does not count."""

from __future__ import annotations

from datetime import datetime, timezone

from attribution.correlate.rootcause import correlate
from attribution.extract.events import extract
from attribution.model import ExecutionContext
from attribution.scope.kubeevidence import kubernetes_observations

UTC = timezone.utc
CTX = ExecutionContext(scheduler="kueue", cluster="c", job_id="ns/w", nodes=("gpu-a01", "gpu-a02"), state="FAILED",
                       start=datetime(2026, 3, 10, 9, 0, tzinfo=UTC), end=datetime(2026, 3, 10, 10, 0, tzinfo=UTC))


def _pod(name, node, **status):
    return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": status}


def test_an_oom_killed_container_is_an_oom_kill_on_the_pods_node_when_it_ended(ruleset):
    pod = _pod("p0", "gpu-a02", containerStatuses=[{"name": "main", "state": {"terminated": {
        "reason": "OOMKilled", "exitCode": 137, "finishedAt": "2026-03-10T09:41:00Z"}}}])
    obs = kubernetes_observations(CTX, {"metadata": {"namespace": "ns", "name": "w"}}, [pod])
    assert obs[0].line == "pod p0 on gpu-a02 container main terminated reason OOMKilled exit_code 137"
    assert [(e.kind, e.node, e.time.isoformat()) for e in extract(ruleset, CTX, obs)] == [
        ("oom_kill", "gpu-a02", "2026-03-10T09:41:00+00:00")]


def test_a_node_lost_during_the_run_is_a_host_cause_and_one_lost_after_it_is_not_counted(ruleset):
    node = {"metadata": {"name": "gpu-a01"},
            "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                 "timeAdded": "2026-03-10T09:30:05Z"},
                                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                       "message": "Kubelet stopped posting node status.",
                                       "lastTransitionTime": "2026-03-10T09:30:00Z"}]}}
    obs = kubernetes_observations(CTX, {"metadata": {"namespace": "ns", "name": "w"}}, [], [node])
    assert [o.line for o in obs] == [
        "node gpu-a01 condition Ready status Unknown reason NodeStatusUnknown: Kubelet stopped posting node status.",
        "node gpu-a01 taint node.kubernetes.io/unreachable:NoExecute"]  # a taint without timeAdded says no time
    events = extract(ruleset, CTX, obs)
    v = correlate(ruleset, CTX, events, [])
    assert (v.outcome, v.root_cause.kind, [n for n, _ in v.culprits]) == ("host", "node_lost", ["gpu-a01"])
    later = {**node, "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                          "timeAdded": "2026-03-10T13:00:00Z"}]}, "status": {}}
    events = extract(ruleset, CTX, kubernetes_observations(CTX, {"metadata": {}}, [], [later]))
    assert correlate(ruleset, CTX, events, []).outcome == "unknown"  # the node went after the job: not its cause


def test_a_kueue_preemption_and_an_eviction_event_keep_their_own_words(ruleset):
    wl = {"metadata": {"namespace": "ns", "name": "w"}, "status": {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": "2026-03-10T09:50:00Z",
         "message": "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the "
                    "ClusterQueue"},
        {"type": "Finished", "status": "False", "reason": "x"}]}}
    ev = {"metadata": {"name": "p0.1"}, "type": "Warning", "reason": "Evicted",
          "involvedObject": {"kind": "Pod", "name": "p0"}, "lastTimestamp": "2026-03-10T09:20:00Z",
          "message": "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi."}
    obs = kubernetes_observations(CTX, wl, [_pod("p0", "gpu-a01")], [], [ev])
    kinds = sorted((e.kind, e.node, e.fields.get("resource")) for e in extract(ruleset, CTX, obs))
    assert kinds == [("pod_evicted", "gpu-a01", "ephemeral-storage"), ("time_limit", None, None)]
