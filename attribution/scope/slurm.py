"""What Slurm tells its prolog and epilogs (docs/slurm.md), turned into an execution context. Pure.

The node Epilog sees SLURMD_NODENAME, SLURM_NODELIST, the raw wait status in SLURM_JOB_EXIT_CODE (768 = exit 3),
and on 23.02+ SLURM_JOB_START_TIME/END_TIME. EpilogSlurmctld sees SLURM_JOB_NODELIST, the job name and the
unexpanded SLURM_JOB_STDOUT pattern. Cancelled and timed-out jobs show exit 0:0 in both; the controller asks
`scontrol show job -o` once for the real state.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping

from attribution.frozen import Value
from attribution.model import ExecutionContext
from attribution.scope.bundle import expand_nodes, normalize_state, scheduler_job_name

UTC = timezone.utc


def decode_wait_status(raw: str | None) -> str | None:
    """A raw wait() status ('768', '11') to Slurm's '<exit>:<signal>' ('3:0', '0:11')."""
    if raw is None or not str(raw).strip().lstrip("-").isdigit():
        return None
    v = int(raw)
    if v < 0:
        return None
    return f"{(v >> 8) & 0xFF}:{v & 0x7F}"


def _epoch(v: str | None) -> datetime | None:
    if not v or not v.strip().isdigit():
        return None
    n = int(v)
    return datetime.fromtimestamp(n, tz=UTC) if n > 0 else None


class EpilogEnv(Value):
    """What Slurm's environment tells a prolog or epilog about its job."""

    context: str  # epilog_slurmd | epilog_slurmctld | prolog_slurmd | ...
    job_id: str
    cluster: str | None
    node: str | None
    nodes: tuple[str, ...]
    user: str | None
    partition: str | None
    exit_code: str | None  # '<exit>:<signal>'
    start: datetime | None
    end: datetime | None
    gpus: str | None
    stdout: str | None
    stderr: str | None
    work_dir: str | None
    job_name: str | None
    array_job_id: str | None
    array_task_id: str | None
    het_job_id: str | None = None  # the leader's id; SLURM_JOB_ID is the component's own (as sacct's JobIDRaw)
    restart_count: int = 0  # how often the job was requeued (SLURM_JOB_RESTART_COUNT)

    @property
    def failed(self) -> bool:
        return self.exit_code is not None and self.exit_code != "0:0"

    @property
    def is_controller(self) -> bool:
        return self.context == "epilog_slurmctld"


def parse_env(env: Mapping[str, str]) -> EpilogEnv:
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        raise ValueError("SLURM_JOB_ID is not set: not running under Slurm")
    context = env.get("SLURM_SCRIPT_CONTEXT") or ("epilog_slurmctld" if "SLURMD_NODENAME" not in env
                                                  else "epilog_slurmd")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        nodes = expand_nodes(nodelist) if nodelist else ()
    except Exception:
        nodes = ()
    node = env.get("SLURMD_NODENAME")
    if node and node not in nodes:
        nodes = nodes + (node,)
    exit_code = env.get("SLURM_JOB_EXIT_CODE2") or decode_wait_status(env.get("SLURM_JOB_EXIT_CODE"))
    return EpilogEnv(
        context=context, job_id=str(job_id), cluster=env.get("SLURM_CLUSTER_NAME"), node=node, nodes=nodes,
        user=env.get("SLURM_JOB_USER"), partition=env.get("SLURM_JOB_PARTITION"), exit_code=exit_code,
        start=_epoch(env.get("SLURM_JOB_START_TIME")), end=_epoch(env.get("SLURM_JOB_END_TIME")),
        gpus=env.get("SLURM_JOB_GPUS"), stdout=env.get("SLURM_JOB_STDOUT"), stderr=env.get("SLURM_JOB_STDERR"),
        work_dir=env.get("SLURM_JOB_WORK_DIR"), job_name=env.get("SLURM_JOB_NAME"),
        array_job_id=env.get("SLURM_ARRAY_JOB_ID"), array_task_id=env.get("SLURM_ARRAY_TASK_ID"),
        het_job_id=env.get("SLURM_HET_JOB_ID"),
        restart_count=int(env["SLURM_JOB_RESTART_COUNT"]) if env.get("SLURM_JOB_RESTART_COUNT", "").isdigit() else 0)


class Window(Value):
    """The time window of a job's evidence on a node, and how it was found."""

    start: datetime
    end: datetime
    how: str  # slurm | prolog | lookback


def job_window(env: EpilogEnv, now: datetime, prolog_start: datetime | None, lookback_seconds: int) -> Window:
    """The job's time window: Slurm's own times (23.02+), else the prolog's stamp, else a bounded look-back."""
    end = env.end or now
    if env.start:
        return Window(env.start, end, "slurm")
    if prolog_start:
        return Window(prolog_start, end, "prolog")
    return Window(end - timedelta(seconds=lookback_seconds), end, "lookback")


def node_context(env: EpilogEnv, window: Window, cluster: str, boot_time: datetime | None) -> ExecutionContext:
    """What a node knows of its job: provisional (the controller's context replaces it). A zero exit code on a
    node also covers cancelled and timed-out jobs; the controller corrects the state."""
    state = "FAILED" if env.failed else "COMPLETED"
    gpus = len([g for g in (env.gpus or "").split(",") if g.strip()]) or None
    return ExecutionContext(
        scheduler="slurm", cluster=cluster, job_id=env.job_id, nodes=env.nodes or ((env.node,) if env.node else ()),
        user=env.user, partition=env.partition, state=state, exit_code=env.exit_code, start=window.start,
        end=window.end, boot_time={env.node: boot_time} if (env.node and boot_time) else {}, gpus_per_node=gpus,
        job_name=scheduler_job_name(env.job_name))


# -- scontrol show job -o ----------------------------------------------------------------------------------------

_KV = re.compile(r"(\w[\w:/]*)=(\S*)")


def parse_scontrol_job(text: str) -> dict[str, str]:
    """`scontrol show job -o <id>` (one line of Key=Value pairs) to a dict. JobName may hold spaces (users name
    jobs): it is everything up to ` UserId=`, the field scontrol prints next."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    out = {m.group(1): m.group(2) for m in _KV.finditer(line)}
    at = line.find(" JobName=")
    if at >= 0 or line.startswith("JobName="):
        start = line.find("JobName=", max(at, 0)) + len("JobName=")
        stop = line.find(" UserId=", start)
        if stop >= 0:
            out["JobName"] = line[start:stop]
    return out


def final_state(info: Mapping[str, str], exit_code: str | None) -> str:
    """The job's final state as EpilogSlurmctld can know it. Inside the epilog the job is still COMPLETING:
    a time limit shows as Reason=TimeLimit, a cancellation as exit 0:15 with no failure reason."""
    state = normalize_state(info.get("JobState"))
    reason = info.get("Reason", "")
    code = info.get("ExitCode") or exit_code or ""
    if state not in ("COMPLETING", "RUNNING", "UNKNOWN", "CONFIGURING", "SUSPENDED"):
        return state
    if reason == "TimeLimit":
        return "TIMEOUT"
    if reason in ("NodeDown", "NodeFail") or reason.startswith("Node"):
        return "NODE_FAIL"
    if reason.startswith("Preempt"):
        return "PREEMPTED"
    if reason == "OutOfMemory":
        return "OUT_OF_MEMORY"
    exit_part, _, sig = code.partition(":")
    if code and exit_part == "0" and sig in ("15", "9"):
        return "CANCELLED"
    if code and code != "0:0":
        return "FAILED"
    return "COMPLETED"


def controller_context(env: EpilogEnv, info: Mapping[str, str], cluster: str, now: datetime) -> ExecutionContext:
    from attribution.timeparse import TimeError, parse_iso

    def t(key: str) -> datetime | None:
        v = info.get(key)
        if not v or v in ("Unknown", "None"):
            return None
        try:
            return parse_iso(v)
        except TimeError:
            return None

    nodes = env.nodes
    if not nodes and info.get("NodeList") not in (None, "", "(null)"):
        try:
            nodes = expand_nodes(info["NodeList"])
        except Exception:
            nodes = ()
    exit_code = env.exit_code or info.get("ExitCode")
    state = final_state(info, exit_code)
    start = env.start or t("StartTime")
    end = env.end or t("EndTime") or now
    tasks = info.get("NumTasks") or ""
    tpn = None
    if tasks.isdigit() and nodes and int(tasks) % len(nodes) == 0:
        tpn = int(tasks) // len(nodes)
    user = env.user or info.get("UserId", "").split("(")[0] or None
    return ExecutionContext(
        scheduler="slurm", cluster=cluster, job_id=env.job_id, nodes=nodes, user=user,
        partition=env.partition or info.get("Partition"), state=state, exit_code=exit_code, start=start,
        end=end if (start is None or end >= start) else start, tasks_per_node=tpn,
        job_name=scheduler_job_name(env.job_name or info.get("JobName")))


# -- SLURM_JOB_STDOUT patterns ---------------------------------------------------------------------------------


def expand_output_pattern(pattern: str, env: EpilogEnv, node: str | None = None, user: str | None = None) -> str:
    """Expand sbatch's filename pattern: %j %J %A %a %u %x %N %n %t %s %% (and zero-padded forms like %4j).
    An empty pattern means Slurm's default slurm-%j.out (slurm-%A_%a.out for arrays) in the work dir."""
    import os

    if not pattern:
        pattern = "slurm-%A_%a.out" if env.array_task_id else "slurm-%j.out"
    values = {
        "j": env.job_id, "J": env.job_id, "A": env.array_job_id or env.job_id, "a": env.array_task_id or "",
        "u": user or env.user or "", "x": env.job_name or "", "N": node or (env.nodes[0] if env.nodes else ""),
        "n": "0", "t": "0", "s": "batch",
    }

    def sub(m: re.Match) -> str:
        width, key = m.group(1), m.group(2)
        if key == "%":
            return "%"
        v = values.get(key)
        if v is None:
            return m.group(0)
        if width and v.isdigit():
            return v.zfill(int(width))
        return v

    out = re.sub(r"%(\d*)([jJAauxNnts%])", sub, pattern)
    if not out.startswith("/") and env.work_dir:
        out = os.path.join(env.work_dir, out)
    return out


def job_output_paths(env: EpilogEnv, info: Mapping[str, str]) -> list[Path]:
    """The job's stdout and stderr files, computed once for every side (the controller epilog, `diagnose
    --slurm-job`): the paths Slurm already expanded (scontrol's or sacct's StdOut/StdErr without a `%`), else the
    job's own patterns from the environment expanded (`expand_output_pattern`), else for stdout Slurm's default
    name in the working directory. Never /dev/null; each file once."""
    paths: list[str] = []
    for key, pattern in (("StdOut", env.stdout), ("StdErr", env.stderr)):
        expanded = info.get(key)
        if expanded and "%" not in expanded:
            paths.append(expanded)
        elif pattern is not None or key == "StdOut":
            paths.append(expand_output_pattern(pattern or "", env))
    return [Path(p) for p in dict.fromkeys(paths) if p and p != "/dev/null"]


#: When the controller cannot tell yet (the job is still COMPLETING), the banner slurmstepd wrote into the job's
#: output says how it ended; the rules put that state in the `job_state` field of the banner's event (a
#: framework reporting its requeue done does so too: rules/signal-handlers.yaml).
BANNER_PRECEDENCE = ("NODE_FAIL", "TIMEOUT", "PREEMPTED", "REQUEUED", "CANCELLED")


def implied_state(events) -> str | None:
    found = {e.fields.get("job_state") for e in events if e.fields.get("job_state")}
    for state in BANNER_PRECEDENCE:
        if state in found:
            return state
    return None


def still_completing(info: Mapping[str, str]) -> bool:
    return normalize_state(info.get("JobState")) in ("COMPLETING", "UNKNOWN", "RUNNING")
