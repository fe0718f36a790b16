"""scope: the Kueue adapter. A Workload (`kubectl get workloads.kueue.x-k8s.io -o json`) and its pods
(`kubectl get pods -o json`) become an execution context. Pure: JSON documents in, values out.

Node placement comes from the pods' `spec.nodeName`, in pod index order; when the pods are gone (post-hoc), from the
Workload's Topology-Aware Scheduling assignment, which names nodes only when one of its levels is the hostname
label (v1beta1 `domains`, v1beta2 `slices`). The time window comes from the Workload's conditions (Admitted or
QuotaReserved to Finished or Evicted), and the state from the Finished and Evicted reasons
(docs/log-formats.md 6.3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from string import Template
from typing import TYPE_CHECKING, Any, Mapping

from attribution.errors import InputError
from attribution.model import ExecutionContext
from attribution.scope.bundle import scheduler_job_name
from attribution.timeparse import TimeError, parse_iso

if TYPE_CHECKING:
    from attribution.config import KubernetesSettings

HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
#: Pod index annotations and labels of the common job kinds, in the order they are tried.
INDEX_KEYS = ("batch.kubernetes.io/job-completion-index", "training.kubeflow.org/replica-index",
              "jobset.sigs.k8s.io/job-index", "kueue.x-k8s.io/pod-group-pod-index")
#: Eviction reasons (Evicted condition) and the job state they mean.
EVICTION_STATES = {"Preempted": "PREEMPTED", "NodeFailures": "NODE_FAIL", "MaximumExecutionTimeExceeded": "TIMEOUT",
                   "Deactivated": "CANCELLED", "RequeuingLimitExceeded": "FAILED", "PodsReadyTimeout": "FAILED",
                   "ClusterQueueStopped": "CANCELLED", "LocalQueueStopped": "CANCELLED", "AdmissionCheck": "FAILED"}


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """One pod of a workload: where it ran and which containers it had (restarted ones have a previous log)."""

    name: str
    node: str | None
    containers: tuple[str, ...]
    restarted: frozenset[str] = frozenset()
    index: int | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    namespace: str
    name: str
    owner_kind: str | None
    owner_name: str | None
    context: ExecutionContext
    pods: tuple[PodPlacement, ...]
    #: what the control plane said about the run (scope.kubeevidence: the Workload's and its pods' conditions and
    #: reasons; the watcher adds the nodes' and the events'), as observations of source `scheduler`
    evidence: tuple = ()


def parse_workload_ref(value: str) -> tuple[str, str]:
    """`NS/NAME` to (namespace, name)."""
    ns, sep, name = value.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise InputError("--kueue-workload", f"expected NAMESPACE/NAME, got {value!r}")
    return ns, name


def object_time(value: Any) -> datetime | None:
    """A Kubernetes object's time stamp (RFC 3339), or None when it has none or an unreadable one."""
    if not value:
        return None
    try:
        return parse_iso(str(value))
    except TimeError:
        return None


def _conditions(status: Mapping) -> dict[str, Mapping]:
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _true(c: Mapping | None) -> bool:
    return bool(c) and str(c.get("status")) == "True"


def tas_hostnames(admission: Mapping) -> list[str]:
    """Node names from Topology-Aware Scheduling, when a level of the assignment is the hostname label."""
    out: list[str] = []
    for psa in admission.get("podSetAssignments") or []:
        ta = psa.get("topologyAssignment") or {}
        levels = list(ta.get("levels") or [])
        if HOSTNAME_LABEL not in levels:
            continue
        idx = levels.index(HOSTNAME_LABEL)
        for dom in ta.get("domains") or []:  # v1beta1
            values = dom.get("values") or []
            if idx < len(values):
                out.append(str(values[idx]))
        for sl in ta.get("slices") or []:  # v1beta2
            per_level = sl.get("valuesPerLevel") or []
            if idx >= len(per_level):
                continue
            v = per_level[idx] or {}
            if "individual" in v:
                ind = v["individual"] or {}
                prefix, suffix = ind.get("prefix") or "", ind.get("suffix") or ""
                out.extend(f"{prefix}{root}{suffix}" for root in ind.get("roots") or [])
            elif "universal" in v:
                out.append(str(v["universal"]))
    return list(dict.fromkeys(out))


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _index(meta: Mapping) -> int | None:
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        for key in INDEX_KEYS:
            v = source.get(key)
            if v is not None and str(v).isdigit():
                return int(v)
    return None


def parse_pods(doc: Any, origin: str = "pods") -> list[Mapping]:
    """A `kubectl get pods -o json` List (or one Pod) to its pod objects, in pod index order."""
    if not isinstance(doc, dict):
        raise InputError(origin, "expected a Kubernetes List or Pod object")
    items = doc.get("items") if doc.get("kind", "List").endswith("List") else [doc]
    if not isinstance(items, list):
        raise InputError(origin, "expected 'items' to be a list of pods")
    pods = [p for p in items if isinstance(p, dict) and p.get("kind", "Pod") == "Pod"]
    return sorted(pods, key=lambda p: (_index(p.get("metadata") or {}) is None,
                                       _index(p.get("metadata") or {}) or 0,
                                       _natural(str((p.get("metadata") or {}).get("name", "")))))


def placement(pod: Mapping) -> PodPlacement:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    containers = tuple(str(c.get("name")) for c in spec.get("containers") or [] if c.get("name"))
    restarted = set()
    for cs in status.get("containerStatuses") or []:
        if int(cs.get("restartCount") or 0) > 0 or (cs.get("lastState") or {}).get("terminated"):
            restarted.add(str(cs.get("name")))
    return PodPlacement(name=str(meta.get("name", "")), node=spec.get("nodeName") or None, containers=containers,
                        restarted=frozenset(restarted), index=_index(meta))


def _terminations(pods: list[Mapping]) -> list[Mapping]:
    out = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            for st in (cs.get("state") or {}, cs.get("lastState") or {}):
                t = st.get("terminated")
                if t:
                    out.append(t)
    return out


def _gpus_per_node(pods: list[Mapping]) -> int | None:
    per_node: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        n = 0
        for c in (pod.get("spec") or {}).get("containers") or []:
            limits = ((c.get("resources") or {}).get("limits") or {})
            v = limits.get(GPU_RESOURCE)
            if v is not None and str(v).isdigit():
                n += int(v)
        per_node[node] = per_node.get(node, 0) + n
    counts = set(per_node.values())
    return counts.pop() if len(counts) == 1 and 0 not in counts else None


def job_state(conditions: Mapping[str, Mapping], pods: list[Mapping]) -> str:
    finished, evicted = conditions.get("Finished"), conditions.get("Evicted")
    if _true(finished) and finished.get("reason") == "Succeeded":
        return "COMPLETED"
    if _true(evicted):
        return EVICTION_STATES.get(str(evicted.get("reason")), "FAILED")
    if _true(finished):
        if any(t.get("reason") == "OOMKilled" for t in _terminations(pods)):
            return "OUT_OF_MEMORY"
        return "FAILED"
    if _true(conditions.get("Admitted")) or _true(conditions.get("QuotaReserved")):
        return "RUNNING"
    return "PENDING"


def workload_context(workload: Any, pods_doc: Any, cluster: str, origin: str = "workload") -> Workload:
    """The execution context of a Workload and its pods (pods_doc may be None when they are gone)."""
    if not isinstance(workload, dict) or workload.get("kind") not in (None, "Workload"):
        raise InputError(origin, "expected a kueue.x-k8s.io Workload object")
    meta = workload.get("metadata") or {}
    status = workload.get("status") or {}
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if not ns or not name:
        raise InputError(origin, "the Workload has no metadata.namespace or metadata.name")
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    pods = parse_pods(pods_doc, f"{origin} pods") if pods_doc is not None else []
    placements = tuple(placement(p) for p in pods)
    nodes = list(dict.fromkeys(p.node for p in placements if p.node))
    admission = status.get("admission") or {}
    if not nodes:
        nodes = tas_hostnames(admission)
    if not nodes:
        raise InputError(origin, f"workload {ns}/{name}: no node placement (no pod has spec.nodeName and the "
                                 f"admission has no topology assignment at the hostname level)")
    conds = _conditions(status)
    start = None
    for kind in ("Admitted", "QuotaReserved"):
        if _true(conds.get(kind)):
            start = object_time(conds[kind].get("lastTransitionTime"))
            if start:
                break
    pod_starts = [t for t in (object_time((p.get("status") or {}).get("startTime")) for p in pods) if t]
    if start is None and pod_starts:
        start = min(pod_starts)
    end = None
    for kind in ("Finished", "Evicted"):
        if _true(conds.get(kind)):
            end = object_time(conds[kind].get("lastTransitionTime"))
            if end:
                break
    finishes = [t for t in (object_time(x.get("finishedAt")) for x in _terminations(pods)) if t]
    if end is None and finishes:
        end = max(finishes)
    if start and end and end < start:
        start = end
    state = job_state(conds, pods)
    exit_code = None
    failed = [t for t in _terminations(pods) if int(t.get("exitCode") or 0) != 0]
    if failed:
        exit_code = f"{int(failed[0].get('exitCode'))}:{int(failed[0].get('signal') or 0)}"
    elif state == "COMPLETED":
        exit_code = "0:0"
    unhealthy = [u.get("name") for u in status.get("unhealthyNodes") or [] if isinstance(u, dict) and u.get("name")]
    ctx = ExecutionContext(
        scheduler="kueue", cluster=cluster, job_id=f"{ns}/{name}", nodes=tuple(nodes), user=None,
        partition=admission.get("clusterQueue") or (workload.get("spec") or {}).get("queueName"), state=state,
        exit_code=exit_code, failed_node=unhealthy[0] if unhealthy else None, start=start, end=end,
        gpus_per_node=_gpus_per_node(pods), job_name=scheduler_job_name(owner.get("name") or name))
    from attribution.scope.kubeevidence import kubernetes_observations

    return Workload(ns, name, owner.get("kind"), owner.get("name"), ctx, placements,
                    tuple(kubernetes_observations(ctx, workload, pods)))


def kubectl_base(settings: KubernetesSettings) -> list[str]:
    """kubectl's argv up to the verb: the program, the kubeconfig and the context of the configured cluster."""
    argv = [settings.kubectl]
    if settings.kubeconfig:
        argv.append(f"--kubeconfig={settings.kubeconfig}")
    if settings.context:
        argv.append(f"--context={settings.context}")
    return argv


def pod_selector(owner_kind: str | None, owner_name: str | None, selectors: Mapping[str, str]) -> str | None:
    """The label selector of the workload's pods, from the kind of the Workload's owner; None when unknown."""
    if not owner_kind or not owner_name or owner_kind not in selectors:
        return None
    return Template(str(selectors[owner_kind])).safe_substitute(name=owner_name)


__all__ = ["PodPlacement", "Workload", "parse_workload_ref", "object_time", "parse_pods", "placement", "tas_hostnames",
           "job_state", "workload_context", "pod_selector", "kubectl_base"]
