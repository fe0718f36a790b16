"""Kubernetes pod logs: `kubectl logs --timestamps --prefix` for every container of every pod of a workload, and
`--previous` for containers that restarted (the crashed instance is usually the one that saw the fault).

The output goes through the job-output parser, which understands the `[pod/NAME/CONTAINER]` prefix and the
RFC 3339 timestamps; every line of a pod belongs to the node the pod ran on unless the line names another host.
Each container log gives one coverage record.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from attribution.config import KubernetesSettings
from attribution.scope.kueue import PodPlacement, kubectl_base
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.joboutput import parse_job_output
from attribution.collect.scan import Prefilter
from attribution.collect.textio import Tapped
from attribution.command import CommandResult, run_command


def logs_argv(settings: KubernetesSettings, namespace: str, pod: str, container: str, previous: bool) -> list[str]:
    argv = kubectl_base(settings) + ["logs", "-n", namespace, pod, "-c", container, "--timestamps", "--prefix"]
    if previous:
        argv.append("--previous")
    return argv


def collect_pod_logs(settings: KubernetesSettings, namespace: str, pods: Sequence[PodPlacement],
                     ctx: ExecutionContext, prefilter: Prefilter, deadline: float,
                     run: Callable[..., CommandResult] = run_command,
                     keeper=None) -> tuple[list[Observation], list[Coverage]]:
    """Every container's log (and a restarted one's previous log); `keeper` (replay.keep.LineKeeper) sees each
    as it is parsed."""
    obs: list[Observation] = []
    cov: list[Coverage] = []
    if not pods:
        cov.append(Coverage("job", None, "missing", reason=f"no pods of the workload in namespace {namespace}"))
        return obs, cov
    for pod in pods:
        node = ctx.resolve_host(pod.node) if pod.node else None
        for container in pod.containers:
            runs = [False] + ([True] if settings.previous and container in pod.restarted else [])
            for previous in runs:
                location = f"pod/{pod.name}/{container}" + ("/previous" if previous else "")
                left = min(settings.timeout, deadline - time.monotonic())
                r = run(logs_argv(settings, namespace, pod.name, container, previous), timeout=left)
                try:
                    if not r.ok:
                        status = "missing" if "not found" in (r.stderr or "") else "error"
                        cov.append(Coverage("job", node, status, reason=r.reason("kubectl logs"), file=location))
                        continue
                    fp = r.stdout if keeper is None else Tapped(r.stdout, keeper.stream_tap("text", "job", node,
                                                                                          location))
                    o, stats = parse_job_output(fp, location, ctx, prefilter, file_node=node)
                finally:
                    r.stdout.close()
                obs.extend(o)
                cov.append(Coverage("job", node, "ok" if stats.bytes else "empty", lines=stats.lines,
                                    file=location, notes=tuple(stats.summary())))
    return obs, cov


__all__ = ["logs_argv", "collect_pod_logs"]
