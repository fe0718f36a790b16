"""A day of Kueue workloads (2026-03-10, cluster helios) for the fake Kubernetes API and the fake Loki: the stories
of tests/data/kueue/day/expected.yaml, as objects and steps.

`initial(api)` puts the nodes and the admitted, running workloads; `STEPS` are what happens next, one callable per
step (a tests.harness.kubeapi timeline entry), each changing Workloads, Pods and their logs the way Kueue, the job
controllers and the kubelet do. The GPU fault is the recorded PyTorchJob of tests/data/kueue/gpt13b-xid79 (its
Workload, pods and pod logs), its nodes' kernel logs in Loki from tests/incidents/01-xid79-fallen-off-bus.
"""

from __future__ import annotations

import copy
import json

from tests.conftest import INCIDENTS, ROOT
from tests.harness.incident_sources import bundle_streams

__all__ = ["initial", "STEPS", "loki_streams", "KUEUE", "CORE", "EXPECTED"]

KUEUE = "kueue.x-k8s.io"
CORE = ""
GPT = ROOT / "tests" / "data" / "kueue" / "gpt13b-xid79"
EXPECTED = ROOT / "tests" / "data" / "kueue" / "day" / "expected.yaml"
NODES = ["hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020"] + [f"gpu-a0{i}" for i in range(1, 7)]


def _cond(typ: str, status: str, reason: str, at: str, message: str = "") -> dict:
    return {"type": typ, "status": status, "reason": reason, "lastTransitionTime": at, "message": message,
            "observedGeneration": 1}


def _workload(ns: str, name: str, job: str, admitted: str, conds: list[dict] = ()) -> dict:
    return {"kind": "Workload", "apiVersion": "kueue.x-k8s.io/v1beta1",
            "metadata": {"namespace": ns, "name": name, "uid": f"wl-{name}",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True,
                                              "uid": f"job-{job}"}]},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1}]},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]},
                       "conditions": [_cond("QuotaReserved", "True", "QuotaReserved", admitted,
                                            "Quota reserved in ClusterQueue cq"),
                                      _cond("Admitted", "True", "Admitted", admitted, "The workload is admitted"),
                                      *conds]}}


def _finished(wl: dict, at: str, reason: str, message: str) -> dict:
    wl = copy.deepcopy(wl)
    wl["status"]["conditions"].append(_cond("Finished", "True", reason, at, message))
    return wl


def _pod(ns: str, name: str, job: str, node: str, started: str, terminated: dict, phase: str = "Failed",
         reason: str | None = None, message: str | None = None) -> dict:
    status = {"phase": phase, "startTime": started,
              "containerStatuses": [{"name": "main", "restartCount": 0, "ready": False,
                                     "state": {"terminated": terminated}}]}
    if reason:
        status["reason"], status["message"] = reason, message
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"namespace": ns, "name": name, "uid": f"pod-{name}",
                         "labels": {"batch.kubernetes.io/job-name": job, "kueue.x-k8s.io/podset": "main"}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/train:1"}]},
            "status": status}


def _ended(code: int, reason: str, started: str, finished: str) -> dict:
    return {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}


def _log(api, ns: str, pod: str, lines: list[tuple[str, str]]) -> None:
    api.logs[(ns, pod, "main", False)] = "".join(f"{t} {text}\n" for t, text in lines)


def _node(name: str) -> dict:
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"conditions": [_cond("Ready", "True", "KubeletReady", "2026-03-01T00:00:00Z",
                                                        "kubelet is posting ready status")]}}


CLEAN = _workload("ml-train", "job-clean-5c1d2", "clean", "2026-03-10T06:00:05Z")
TOKENIZER = _workload("team-a", "job-tokenizer-4b7e1", "tokenizer", "2026-03-10T06:10:02Z")
BIGBATCH = _workload("team-a", "job-bigbatch-8d2f0", "bigbatch", "2026-03-10T07:00:00Z")
DATAPREP = _workload("team-a", "job-dataprep-2a9c4", "dataprep", "2026-03-10T09:00:00Z")
SWEEP = _workload("team-b", "job-sweep-71e3a", "sweep", "2026-03-10T07:30:00Z")


def _gpt_running() -> dict:
    wl = json.loads((GPT / "workload.json").read_text())
    wl["status"]["conditions"] = [c for c in wl["status"]["conditions"] if c["type"] != "Finished"]
    return wl


def initial(api) -> None:
    for n in NODES:
        api.put(CORE, "nodes", _node(n))
    for wl in (CLEAN, TOKENIZER, BIGBATCH, DATAPREP, SWEEP, _gpt_running()):
        api.put(KUEUE, "workloads", wl)


def step_clean_and_tokenizer(api) -> None:
    p = _pod("ml-train", "clean-x7k2p", "clean", "gpu-a01", "2026-03-10T06:00:09Z",
             _ended(0, "Completed", "2026-03-10T06:00:12Z", "2026-03-10T06:41:30Z"), phase="Succeeded")
    _log(api, "ml-train", "clean-x7k2p", [("2026-03-10T06:00:13.000000000Z", "epoch 1/1 started"),
                                          ("2026-03-10T06:41:29.000000000Z", "training finished, checkpoint saved")])
    api.put(CORE, "pods", p)
    api.put(KUEUE, "workloads", _finished(CLEAN, "2026-03-10T06:41:31Z", "Succeeded", "Job finished successfully"))
    p = _pod("team-a", "tokenizer-q9w4z", "tokenizer", "gpu-a02", "2026-03-10T06:10:05Z",
             _ended(1, "Error", "2026-03-10T06:10:07Z", "2026-03-10T06:12:44Z"))
    _log(api, "team-a", "tokenizer-q9w4z", [
        ("2026-03-10T06:10:08.120000000Z", "loading dataset shards 0-63"),
        ("2026-03-10T06:12:43.900000000Z", "Traceback (most recent call last):"),
        ("2026-03-10T06:12:43.900000000Z", '  File "/app/prep.py", line 88, in <module>'),
        ("2026-03-10T06:12:43.900000000Z", '    batch = encode(rows["input_ids"])'),
        ("2026-03-10T06:12:43.900000000Z", "KeyError: 'input_ids'")])
    api.put(CORE, "pods", p)
    api.put(KUEUE, "workloads", _finished(TOKENIZER, "2026-03-10T06:12:46Z", "Failed",
                                          "Job failed: Job has reached the specified backoff limit"))


def step_oom_and_preemption(api) -> None:
    p = _pod("team-a", "bigbatch-m2v8c", "bigbatch", "gpu-a03", "2026-03-10T07:00:04Z",
             _ended(137, "OOMKilled", "2026-03-10T07:00:06Z", "2026-03-10T07:31:10Z"))
    _log(api, "team-a", "bigbatch-m2v8c", [("2026-03-10T07:00:07.000000000Z", "global batch 4096, micro batch 64"),
                                           ("2026-03-10T07:31:02.000000000Z", "step 310 loss 3.112")])
    api.put(CORE, "pods", p)
    api.put(KUEUE, "workloads", _finished(BIGBATCH, "2026-03-10T07:31:12Z", "Failed",
                                          "Job failed: Job has reached the specified backoff limit"))
    p = _pod("team-b", "sweep-b5n1r", "sweep", "gpu-a05", "2026-03-10T07:30:04Z",
             _ended(143, "Error", "2026-03-10T07:30:06Z", "2026-03-10T08:05:31Z"))
    _log(api, "team-b", "sweep-b5n1r", [("2026-03-10T07:30:07.000000000Z", "trial 3: lr=3e-4"),
                                        ("2026-03-10T08:05:20.000000000Z", "step 900 loss 2.870")])
    api.put(CORE, "pods", p)
    wl = copy.deepcopy(SWEEP)
    msg = ("Preempted to accommodate a workload (UID: 9f542104-a9e2-4344-ad2e-9c136204da18, JobUID: "
           "a20d0a6a-64a3-46ce-9b95-8cfb3bf6e675) due to prioritization in the ClusterQueue")
    wl["status"]["conditions"] += [_cond("Evicted", "True", "Preempted", "2026-03-10T08:05:30Z", msg),
                                   _cond("Preempted", "True", "InClusterQueue", "2026-03-10T08:05:30Z", msg)]
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
    api.put(KUEUE, "workloads", wl)


def _sweep_second_run(finished: bool) -> dict:
    wl = copy.deepcopy(SWEEP)
    at = "2026-03-10T10:02:00Z"
    wl["status"]["conditions"] = [
        _cond("QuotaReserved", "True", "QuotaReserved", at, "Quota reserved in ClusterQueue cq"),
        _cond("Admitted", "True", "Admitted", at, "The workload is admitted"),
        _cond("Evicted", "False", "QuotaReserved", at, "Previously: Preempted to accommodate a workload"),
        _cond("Preempted", "False", "QuotaReserved", at, "Previously: Preempted to accommodate a workload"),
        _cond("Requeued", "True", "Admitted", at, "The workload is admitted")]
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
    if finished:
        wl["status"]["conditions"].append(_cond("Finished", "True", "Failed", "2026-03-10T10:06:41Z",
                                                "Job failed: Job has reached the specified backoff limit"))
    return wl


def step_gpu_and_requeue(api) -> None:
    pods = json.loads((GPT / "pods.json").read_text())["items"]
    for p in pods:
        api.put(CORE, "pods", p)
    for f in (GPT / "logs").glob("*.log"):
        pod, _, rest = f.name.partition("_")
        container, previous = rest.removesuffix(".log").removesuffix(".previous"), rest.endswith(".previous.log")
        text = "".join(line.split(" ", 1)[1] + "\n" for line in f.read_text().splitlines())  # no kubectl --prefix
        api.logs[("ml-train", pod, container, previous)] = text
    api.put(KUEUE, "workloads", json.loads((GPT / "workload.json").read_text()))
    api.delete(CORE, "pods", "team-b", "sweep-b5n1r")  # the suspended Job's pod goes; the requeued run starts
    api.put(KUEUE, "workloads", _sweep_second_run(False))


def step_eviction_and_sweep_failure(api) -> None:
    msg = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 312Ki. Container main was "
           "using 180Gi, request is 64Gi, has larger consumption of memory.")
    p = _pod("team-a", "dataprep-h3s6t", "dataprep", "gpu-a04", "2026-03-10T09:00:03Z",
             _ended(137, "Error", "2026-03-10T09:00:05Z", "2026-03-10T10:20:14Z"), reason="Evicted", message=msg)
    _log(api, "team-a", "dataprep-h3s6t", [("2026-03-10T09:00:06.000000000Z", "reading 2.1 TB of parquet"),
                                           ("2026-03-10T10:20:01.000000000Z", "joined 1.4e9 rows")])
    api.put(CORE, "pods", p)
    api.put(KUEUE, "workloads", _finished(DATAPREP, "2026-03-10T10:20:16Z", "Failed",
                                          "Job failed: Job has reached the specified backoff limit"))
    p = _pod("team-b", "sweep-k8d3f", "sweep", "gpu-a06", "2026-03-10T10:02:04Z",
             _ended(1, "Error", "2026-03-10T10:02:06Z", "2026-03-10T10:06:39Z"))
    _log(api, "team-b", "sweep-k8d3f", [
        ("2026-03-10T10:02:07.000000000Z", "trial 4: lr=-0.001"),
        ("2026-03-10T10:06:38.500000000Z", "Traceback (most recent call last):"),
        ("2026-03-10T10:06:38.500000000Z", '  File "/app/sweep.py", line 41, in <module>'),
        ("2026-03-10T10:06:38.500000000Z", "    opt = make_optimizer(cfg)"),
        ("2026-03-10T10:06:38.500000000Z", "ValueError: learning rate must be positive, got -0.001")])
    api.put(CORE, "pods", p)
    api.put(KUEUE, "workloads", _sweep_second_run(True))


def step_cleanup(api) -> None:
    api.delete(KUEUE, "workloads", "ml-train", "job-clean-5c1d2")  # ttlSecondsAfterFinished: the Job and its Workload go


STEPS = [step_clean_and_tokenizer, step_oom_and_preemption, step_gpu_and_requeue, "drop",
         step_eviction_and_sweep_failure, step_cleanup]


def loki_streams():
    """The GPU job's nodes' kernel logs as a shipper put them into Loki (no job output: that is the pods' logs)."""
    return [(labels, entries) for labels, entries in bundle_streams(INCIDENTS / "01-xid79-fallen-off-bus")
            if labels.get("source") != "job"]
