"""scope: Kubernetes' own word on a workload's run, as observations the rules read (rules/kubernetes.yaml), the way
`scope.bundle.scheduler_observations` gives Slurm's. Pure: API objects (dicts) in, observations out.

One line per fact, in a fixed form (docs/kubernetes.md "What Kubernetes says"), with the object's own reason and
message and the time Kubernetes recorded for it:

    workload NS/NAME condition Evicted reason Preempted: Preempted to accommodate a workload (UID: ...) due to ...
    pod NAME on NODE phase Failed reason Evicted: The node was low on resource: memory. ...
    pod NAME on NODE condition DisruptionTarget reason DeletionByTaintManager: Taint manager: deleting due to ...
    pod NAME on NODE container C terminated reason OOMKilled exit_code 137
    node NODE taint node.kubernetes.io/unreachable:NoExecute
    node NODE condition Ready status Unknown reason NodeStatusUnknown: Kubelet stopped posting node status.
    event Warning NodeNotReady on Pod/NAME node NODE: Node is not ready

Which of them is an event, and of what kind, is the rules' business; what is said here is only what the objects say.
Their source is `scheduler` (system-written: the control plane, not the job, wrote it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping

from attribution.model import ExecutionContext, Observation
from attribution.scope.kueue import object_time as _time

SOURCE = "scheduler"
#: Workload conditions whose True state is part of a run's story (docs/log-formats.md 6.3).
WORKLOAD_CONDITIONS = ("Evicted", "Preempted")


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())[:1000]


def _said(reason: Any, message: Any) -> str:
    reason, message = _one_line(reason), _one_line(message)
    return f"reason {reason or '-'}" + (f": {message}" if message else "")


def _obs(node: str | None, location: str, text: str, time: datetime | None) -> Observation:
    return Observation(source=SOURCE, node=node, location=location, text=text, line=text, time=time)


def workload_observations(ctx: ExecutionContext, workload: Mapping) -> list[Observation]:
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    ref = f"{meta.get('namespace')}/{meta.get('name')}"
    out = []
    for c in status.get("conditions") or []:
        if not isinstance(c, dict) or c.get("type") not in WORKLOAD_CONDITIONS or str(c.get("status")) != "True":
            continue
        out.append(_obs(None, f"workload/{ref}:status", f"workload {ref} condition {c['type']} "
                                                        f"{_said(c.get('reason'), c.get('message'))}",
                        _time(c.get("lastTransitionTime"))))
    return out


def pod_observations(ctx: ExecutionContext, pod: Mapping) -> list[Observation]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    name = str(meta.get("name") or "")
    node = ctx.resolve_host(spec.get("nodeName"))
    where = f"pod {name} on {spec.get('nodeName') or '-'}"
    loc = f"pod/{name}:status"
    out = []
    ends = []
    for cs in status.get("containerStatuses") or []:
        if not isinstance(cs, dict):
            continue
        for st in (cs.get("lastState") or {}, cs.get("state") or {}):
            t = st.get("terminated") if isinstance(st, dict) else None
            if not isinstance(t, dict):
                continue
            at = _time(t.get("finishedAt"))
            ends += [at] if at else []
            if t.get("reason") == "Completed" and not int(t.get("exitCode") or 0):
                continue
            text = (f"{where} container {cs.get('name')} terminated reason {_one_line(t.get('reason')) or '-'} "
                    f"exit_code {int(t.get('exitCode') or 0)}")
            if t.get("signal"):
                text += f" signal {int(t['signal'])}"
            out.append(_obs(node, loc, text, at))
    conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    for c in conds.values():
        if c.get("type") == "DisruptionTarget" and str(c.get("status")) == "True":
            out.append(_obs(node, loc, f"{where} condition DisruptionTarget {_said(c.get('reason'), c.get('message'))}",
                            _time(c.get("lastTransitionTime"))))
    if status.get("reason"):
        ready = conds.get("Ready") or {}
        when = max(ends) if ends else _time(ready.get("lastTransitionTime"))
        out.append(_obs(node, loc, f"{where} phase {status.get('phase') or '-'} "
                                   f"{_said(status.get('reason'), status.get('message'))}", when))
    return out


def node_observations(ctx: ExecutionContext, node: Mapping) -> list[Observation]:
    """A node's taints that say when they were put on (the NoExecute ones: `timeAdded`) and its Ready condition when
    it is not True: the window decides whether they happened during the run."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    name = str(meta.get("name") or "")
    host = ctx.resolve_host(name)
    loc = f"node/{name}:status"
    out = []
    for taint in spec.get("taints") or []:
        if isinstance(taint, dict) and taint.get("timeAdded"):
            out.append(_obs(host, loc, f"node {name} taint {taint.get('key')}:{taint.get('effect')}",
                            _time(taint.get("timeAdded"))))
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready" and str(c.get("status")) != "True":
            out.append(_obs(host, loc, f"node {name} condition Ready status {c.get('status')} "
                                       f"{_said(c.get('reason'), c.get('message'))}",
                            _time(c.get("lastTransitionTime"))))
    return out


def event_observations(ctx: ExecutionContext, events: Iterable[Mapping], pod_nodes: Mapping[str, str]) -> list:
    """core/v1 Events about the workload, its pods and its nodes; a pod's event belongs to the pod's node."""
    out = []
    for ev in events:
        inv = ev.get("involvedObject") or {}
        kind, name = str(inv.get("kind") or ""), str(inv.get("name") or "")
        node = pod_nodes.get(name) if kind == "Pod" else (name if kind == "Node" else None)
        when = _time(ev.get("eventTime")) or _time(ev.get("lastTimestamp")) or _time(ev.get("firstTimestamp"))
        text = (f"event {_one_line(ev.get('type')) or '-'} {_one_line(ev.get('reason')) or '-'} on {kind}/{name}"
                + (f" node {node}" if node else "") + f": {_one_line(ev.get('message'))}")
        out.append(_obs(ctx.resolve_host(node), f"event/{(ev.get('metadata') or {}).get('name', '')}", text, when))
    return out


def kubernetes_observations(ctx: ExecutionContext, workload: Mapping, pods: Iterable[Mapping] = (),
                            nodes: Iterable[Mapping] = (), events: Iterable[Mapping] = ()) -> list[Observation]:
    """Everything the control plane said about one run of a workload, oldest first (untimed last)."""
    pods = list(pods)
    obs = workload_observations(ctx, workload)
    for p in pods:
        obs += pod_observations(ctx, p)
    for n in nodes:
        obs += node_observations(ctx, n)
    pod_nodes = {str((p.get("metadata") or {}).get("name")): (p.get("spec") or {}).get("nodeName") for p in pods}
    obs += event_observations(ctx, events, {k: v for k, v in pod_nodes.items() if v})
    return sorted(obs, key=lambda o: (o.time is None, o.time.timestamp() if o.time else 0.0, o.location, o.text))


__all__ = ["kubernetes_observations", "workload_observations", "pod_observations", "node_observations",
           "event_observations"]
