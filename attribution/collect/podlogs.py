"""Kubernetes pod logs through the API (`GET .../pods/NAME/log?timestamps=true`, collect.kubeapi), the watcher's
counterpart of collect.kubelogs (which runs `kubectl logs`): every container of every pod, and the previous
instance of a restarted one. Each log goes through the job-output parser, which reads the RFC 3339 stamp; every
line belongs to the pod's node unless it names another host. One coverage record per log: `missing` when the pod or
the previous instance is gone (deleted, logs rotated away), `error` when the server failed, a note when the
workload's time ran out mid-log.
"""

from __future__ import annotations

import time
from typing import Sequence

from attribution.collect.joboutput import parse_job_output
from attribution.collect.kubeapi import KubeApi, KubeApiError
from attribution.collect.scan import Prefilter
from attribution.collect.textio import Tapped
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.scope.kueue import PodPlacement


def collect_api_pod_logs(api: KubeApi, namespace: str, pods: Sequence[PodPlacement], ctx: ExecutionContext,
                         prefilter: Prefilter, deadline: float, previous: bool = True,
                         keeper=None) -> tuple[list[Observation], list[Coverage]]:
    obs: list[Observation] = []
    cov: list[Coverage] = []
    if not pods:
        cov.append(Coverage("job", None, "missing", reason=f"no pods of the workload in namespace {namespace} "
                                                           f"(deleted before they could be read)"))
        return obs, cov
    for pod in pods:
        node = ctx.resolve_host(pod.node) if pod.node else None
        for container in pod.containers:
            for prev in [False] + ([True] if previous and container in pod.restarted else []):
                location = f"pod/{pod.name}/{container}" + ("/previous" if prev else "")
                if time.monotonic() >= deadline:
                    cov.append(Coverage("job", node, "error", reason="the time for this workload ran out",
                                        file=location))
                    continue
                try:
                    stream = api.log(namespace, pod.name, container, prev, deadline)
                except KubeApiError as exc:
                    gone = exc.status in (400, 404)  # the pod, or its previous instance, is not there any more
                    cov.append(Coverage("job", node, "missing" if gone else "error", reason=str(exc), file=location))
                    continue
                try:
                    fp = stream if keeper is None else Tapped(stream, keeper.stream_tap("text", "job", node,
                                                                                       location))
                    o, stats = parse_job_output(fp, location, ctx, prefilter, file_node=node)
                finally:
                    stream.close()
                obs.extend(o)
                notes = tuple(stats.summary()) + ((f"read up to here: {stream.cut}",) if stream.cut else ())
                cov.append(Coverage("job", node, "ok" if stats.bytes else "empty", lines=stats.lines,
                                    file=location, notes=notes))
    return obs, cov


__all__ = ["collect_api_pod_logs"]
