"""Asking the schedulers about jobs: `sacct`/`scontrol` for Slurm, `kubectl get` for Kueue. The I/O half of the
scope adapters in `sacct` and `kueue`; every failure becomes an InputError naming the command and its complaint."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from attribution.command import run_command
from attribution.config import ConnectorSettings
from attribution.errors import InputError
from attribution.scope.kueue import Workload, kubectl_base, pod_selector, workload_context
from attribution.scope.sacct import FIELDS, OPTIONAL_FIELDS, SacctJob, parse_sacct, sacct_argv
from attribution.scope import scontrol, slurm
from attribution.scope.slurm import EpilogEnv
from attribution.scope.slurmjson import json_capable, parse_sacct_json, version_of

#: sacct prints times in the zone of its own process, and takes --starttime/--endtime in it: make that UTC.
SACCT_ENV = {"TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
WORKLOAD_RESOURCE = "workloads.kueue.x-k8s.io"


def _sacct_version(sacct: str, timeout: float) -> tuple[int, int] | None:
    """The version of the sacct that `sacct` names now (resolved on PATH: another PATH, another sacct)."""
    return _version_of_binary(shutil.which(sacct) or sacct, timeout)


@lru_cache(maxsize=8)
def _version_of_binary(sacct: str, timeout: float) -> tuple[int, int] | None:
    r = run_command([sacct, "--version"], timeout=timeout)
    try:
        return version_of(r.text()) if r.ok else None
    finally:
        r.stdout.close()


def sacct_jobs(connectors: ConnectorSettings, job: str | None = None, since: datetime | None = None,
               until: datetime | None = None) -> list[SacctJob]:
    """Jobs from sacct: one job id (with its array tasks), or every job of [since, until). `sacct --json` where
    the version has a trustworthy one (23.02 and newer, detected by `sacct --version`), `sacct -P` otherwise."""
    s = connectors.slurm
    if json_capable(_sacct_version(s.sacct, s.timeout)):
        argv = sacct_argv(s.sacct, (), job=job, since=since, until=until)
        argv = [a for a in argv if a not in ("-P", "--format=")] + ["--json"]
        r = run_command(argv, timeout=s.timeout, env=SACCT_ENV)
        try:
            text = r.text()
        finally:
            r.stdout.close()
        if not r.ok:
            raise InputError("sacct", r.reason("sacct"))
        return parse_sacct_json(text, "sacct --json")
    fields = FIELDS
    for _ in range(2):
        r = run_command(sacct_argv(s.sacct, fields, job=job, since=since, until=until), timeout=s.timeout,
                        env=SACCT_ENV)
        try:
            text = r.text()
        finally:
            r.stdout.close()
        if r.ok:
            return parse_sacct(text, "sacct")
        if "Invalid field" in r.stderr and fields == FIELDS:
            fields = tuple(f for f in FIELDS if f not in OPTIONAL_FIELDS)  # an older sacct (22.05: no FailedNode)
            continue
        raise InputError("sacct", r.reason("sacct"))
    raise InputError("sacct", "sacct refused the field list")


def sacct_job(connectors: ConnectorSettings, job_id: str) -> SacctJob:
    jobs = sacct_jobs(connectors, job=job_id)
    for j in jobs:
        if job_id in (j.job_id, j.display_id):
            return j
    if len(jobs) == 1:
        return jobs[0]
    raise InputError("sacct", f"job {job_id}: not in the accounting database"
                     + (f" (sacct listed {', '.join(j.display_id for j in jobs[:5])})" if jobs else ""))


def job_output_paths(connectors: ConnectorSettings, job: SacctJob) -> list[Path]:
    """The job's stdout and stderr (`slurm.job_output_paths`): sacct's expanded paths (its JSON, 23.02+), else
    scontrol's while slurmctld still knows the job, otherwise Slurm's default name (slurm-%j.out, slurm-%A_%a.out
    for array tasks) in the job's working directory."""
    known = {k: v for k in ("StdOut", "StdErr") if (v := job.get(k)) and "%" not in v and v != "/dev/null"}
    s = connectors.slurm
    info = known or scontrol.show_job(job.job_id, s.scontrol, s.timeout)
    array_job, _, array_task = job.display_id.partition("_")
    env = EpilogEnv(context="sacct", job_id=job.job_id, cluster=job.get("Cluster"), node=None, nodes=(),
                    user=job.get("User"), partition=job.get("Partition"), exit_code=job.get("ExitCode"), start=None,
                    end=None, gpus=None, stdout=None, stderr=None, work_dir=info.get("WorkDir") or job.get("WorkDir"),
                    job_name=job.get("JobName"), array_job_id=array_job if array_task else None,
                    array_task_id=array_task if array_task.isdigit() else None)
    return slurm.job_output_paths(env, info)


def _kubectl_json(connectors: ConnectorSettings, args: list[str], what: str, timeout: float):
    r = run_command(kubectl_base(connectors.kubernetes) + args + ["-o", "json"], timeout=timeout)
    try:
        text = r.text()
    finally:
        r.stdout.close()
    if not r.ok:
        raise InputError(what, r.reason("kubectl"))
    try:
        return json.loads(text)
    except ValueError:
        raise InputError(what, "kubectl did not print JSON") from None


def kueue_workload(connectors: ConnectorSettings, namespace: str, name: str, cluster: str,
                   selector: str | None = None) -> tuple[Workload, str | None]:
    """The Workload and its pods, as an execution context. Returns the workload and the pod selector used (None
    when the pods could not be found: their placement then comes from the topology assignment)."""
    k = connectors.kubernetes
    what = f"workload {namespace}/{name}"
    doc = _kubectl_json(connectors, ["get", WORKLOAD_RESOURCE, "-n", namespace, name], what, k.timeout)
    meta = doc.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    selector = selector or pod_selector(owner.get("kind"), owner.get("name"), k.pod_selectors)
    if selector is None:
        return workload_context(doc, None, cluster, what), None
    pods = _kubectl_json(connectors, ["get", "pods", "-n", namespace, "-l", selector], f"{what} pods", k.timeout)
    return workload_context(doc, pods, cluster, what), selector


__all__ = ["sacct_jobs", "sacct_job", "job_output_paths", "kueue_workload", "SACCT_ENV"]
