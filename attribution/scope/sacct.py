"""scope: the Slurm accounting adapter. `sacct -P` text becomes jobs and execution contexts. Pure.

`sacct --json` of Slurm 22.05 reports wrong exit codes, so the parsable text is read (docs/log-formats.md
5.4): `|`-separated with a header line, no trailing `|`. Rows whose JobID has a step suffix (`123.batch`,
`123.extern`, `123.0`, `123_4.batch`) are steps, not jobs: they only lend the job their task count. Array tasks
(`123_4`) are jobs of their own. Times are read in UTC: the caller runs sacct with TZ=UTC.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Mapping

import hostlist

from attribution.errors import InputError
from attribution.model import ExecutionContext
from attribution.scope.bundle import normalize_state, scheduler_job_name
from attribution.timeparse import TimeError, parse_iso

#: What we ask sacct for. FailedNode exists only in newer Slurm (not 22.05): without it, sacct is asked again.
FIELDS = ("JobIDRaw", "JobID", "JobName", "User", "Partition", "State", "ExitCode", "DerivedExitCode", "Start",
          "End", "NodeList", "NNodes", "NTasks", "AllocTRES", "Cluster", "WorkDir", "Reason", "FailedNode")
OPTIONAL_FIELDS = ("FailedNode",)
#: States of jobs that have not ended yet; they are not diagnosed.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING", "CONFIGURING",
                           "SIGNALING", "STAGE_OUT", "STOPPED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                           "SPECIAL_EXIT", "POWER_UP_NODE", "UPDATE_DB"})
_STEP = re.compile(r"^\d+(?:_\d+)?(?:\+\d+)?\.(?:batch|extern|interactive|\d+)(?:\+\d+)?$")
_JOB = re.compile(r"^\d+(?:_(?:\d+|\[[^\]]*\]))?(?:\+\d+)?$")
_EMPTY = ("", "Unknown", "None", "None assigned", "(null)", "N/A")


@dataclass(frozen=True, slots=True)
class SacctJob:
    job_id: str  # JobIDRaw: the id the epilogs see as SLURM_JOB_ID (an array task has its own)
    display_id: str  # JobID as users write it: 123, 123_4
    fields: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    tasks: int | None = None  # the largest task count of its numbered steps

    def get(self, name: str) -> str | None:
        v = self.fields.get(name)
        return None if v is None or v.strip() in _EMPTY else v.strip()

    @property
    def state(self) -> str:
        return normalize_state(self.get("State"))

    @property
    def ended(self) -> bool:
        return self.state not in ACTIVE_STATES and self.get("End") is not None

    @property
    def failed(self) -> bool:
        """Ended in any state but COMPLETED (a non-zero exit, a cancel, a time limit, a node failure...)."""
        return self.ended and self.state != "COMPLETED"


def sacct_argv(sacct: str, fields: tuple[str, ...] = FIELDS, job: str | None = None,
               since: datetime | None = None, until: datetime | None = None, all_users: bool = True) -> list[str]:
    """The sacct command for one job, or for every job of a time range."""
    argv = [sacct, "-P", f"--format={','.join(fields)}"]
    if job is not None:
        argv += ["-j", job]
    else:
        if all_users:
            argv.append("--allusers")
        if since is not None:
            argv.append(f"--starttime={since.strftime('%Y-%m-%dT%H:%M:%S')}")
        if until is not None:
            argv.append(f"--endtime={until.strftime('%Y-%m-%dT%H:%M:%S')}")
    return argv


def is_step(job_id: str) -> bool:
    return bool(_STEP.match(job_id))


def parse_sacct(text: str, origin: str = "sacct") -> list[SacctJob]:
    """`sacct -P` output (header line first) to its jobs, in the order sacct listed them."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    if "JobID" not in header and "JobIDRaw" not in header:
        raise InputError(origin, f"line 1: not a sacct -P header (no JobID column): {lines[0][:120]!r}")
    jobs: dict[str, dict] = {}
    order: list[str] = []
    tasks: dict[str, int] = {}
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split("|")
        if len(cells) != len(header):
            raise InputError(origin, f"line {n}: {len(cells)} fields, the header has {len(header)}")
        row = dict(zip(header, cells))
        display = (row.get("JobID") or row.get("JobIDRaw") or "").strip()
        raw = (row.get("JobIDRaw") or display).strip()
        if is_step(display) or is_step(raw):
            parent = raw.split(".", 1)[0]
            if (row.get("NTasks") or "").strip().isdigit() and display.rsplit(".", 1)[-1].split("+")[0].isdigit():
                tasks[parent] = max(tasks.get(parent, 0), int(row["NTasks"]))
            continue
        if not _JOB.match(display):
            raise InputError(origin, f"line {n}: {display!r} is neither a job nor a step id")
        if raw not in jobs:
            order.append(raw)
        jobs[raw] = {"display": display, "row": row}  # a requeued job listed twice: the last row wins
    return [SacctJob(job_id=j, display_id=jobs[j]["display"], fields=MappingProxyType(dict(jobs[j]["row"])),
                     tasks=tasks.get(j)) for j in order]


def _time(job: SacctJob, name: str, origin: str) -> datetime | None:
    v = job.get(name)
    if v is None:
        return None
    try:
        return parse_iso(v)
    except TimeError:
        raise InputError(origin, f"job {job.display_id}: {name} {v!r} is not a time") from None


def gpus_from_tres(tres: str | None) -> int | None:
    """Total GPUs from AllocTRES: `gres/gpu=16`, or the typed `gres/gpu:a100=8` when the untyped one is absent."""
    if not tres:
        return None
    plain = None
    typed = 0
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            plain = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return plain if plain is not None else (typed or None)


def context_of(job: SacctJob, cluster: str | None = None, origin: str = "sacct") -> ExecutionContext:
    """The execution context of one ended job. The cluster is sacct's own name for it (the one the epilogs see as
    SLURM_CLUSTER_NAME, so both describe the same stored job); `cluster` only when sacct has none."""
    nodelist = job.get("NodeList")
    if nodelist is None:
        raise InputError(origin, f"job {job.display_id}: no nodes (state {job.state}: it never ran)")
    try:
        nodes = tuple(dict.fromkeys(hostlist.expand_hostlist(nodelist)))
    except hostlist.BadHostlist as exc:
        raise InputError(origin, f"job {job.display_id}: bad NodeList {nodelist!r}: {exc}") from None
    start, end = _time(job, "Start", origin), _time(job, "End", origin)
    if start and end and end < start:
        start = end
    gpus = gpus_from_tres(job.get("AllocTRES"))
    gpus_per_node = gpus // len(nodes) if gpus and len(nodes) and gpus % len(nodes) == 0 else None
    tpn = job.tasks // len(nodes) if job.tasks and job.tasks % len(nodes) == 0 else None
    failed_node = job.get("FailedNode")
    return ExecutionContext(
        scheduler="slurm", cluster=job.get("Cluster") or cluster or "default", job_id=job.job_id, nodes=nodes,
        user=job.get("User"), partition=job.get("Partition"), state=job.state, exit_code=job.get("ExitCode"),
        failed_node=failed_node if failed_node in nodes else None, tasks_per_node=tpn, start=start, end=end,
        gpus_per_node=gpus_per_node or None, job_name=scheduler_job_name(job.get("JobName")))


__all__ = ["FIELDS", "OPTIONAL_FIELDS", "ACTIVE_STATES", "SacctJob", "sacct_argv", "is_step", "parse_sacct",
           "gpus_from_tres", "context_of"]
