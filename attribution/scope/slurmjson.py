"""scope: `sacct --json` and `scontrol show job --json` of Slurm 23.02 and newer, turned into the same records
as their text forms (`sacct.SacctJob`, the `scontrol show job -o` dict). Pure.

Shapes measured on Slurm 24.11.5 (data_parser v0.0.42, docs/slurm.md): numbers are `{"set", "infinite",
"number"}` objects, exit codes `{"status": [...], "return_code": {...}, "signal": {"id": {...}, "name"}}`, states
lists (`["TIMEOUT", "COMPLETING"]`), times epoch seconds. Older parsers (v0.0.39) print plain numbers; both are read.
What JSON gives that the text does not: sacct's `stdout_expanded`/`stderr_expanded` (the job's output files
after slurmctld forgot the job), and scontrol's final state while the job is still COMPLETING (inside
EpilogSlurmctld the text says `JobState=COMPLETING`, the JSON `["TIMEOUT", "COMPLETING"]`). 22.05's JSON
reports wrong exit codes: callers use JSON only from 23.02 on (`json_capable`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from attribution.errors import InputError
from attribution.scope.sacct import SacctJob

UTC = timezone.utc
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
#: Base job states (a job's state list may add flags such as COMPLETING, REQUEUED).
_FLAGS = frozenset({"COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
                    "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "SIGNALING", "UPDATE_DB", "POWER_UP_NODE",
                    "LAUNCH_FAILED", "RECONFIG_FAIL", "RESV_DEL_HOLD", "REVOKED", "EXPEDITING"})


def version_of(text: str) -> tuple[int, int] | None:
    """`sacct --version` / `scontrol --version` ('slurm 24.11.5') to (24, 11)."""
    m = _VERSION.search(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def json_capable(version: tuple[int, int] | None) -> bool:
    """Slurm's JSON is trusted from 23.02 (the data_parser plugins); 22.05's has wrong exit codes."""
    return version is not None and version >= (23, 2)


def num(v: Any) -> int | float | None:
    """A data_parser number (`{"set": true, "number": 5}`) or a plain one; None when unset or infinite."""
    if isinstance(v, dict):
        if not v.get("set", True) or v.get("infinite"):
            return None
        v = v.get("number")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v


def exit_code(v: Any) -> str | None:
    """An exit code object to Slurm's '<exit>:<signal>' ('3:0', '0:15')."""
    if v is None:
        return None
    if not isinstance(v, dict):
        n = num(v)
        return None if n is None else f"{int(n)}:0"
    rc = num(v.get("return_code"))
    sig = v.get("signal") or {}
    signo = num(sig.get("id")) if isinstance(sig, dict) else None
    if rc is None and signo is None:
        return None
    return f"{int(rc or 0)}:{int(signo or 0)}"


def base_state(states: Any) -> str:
    """The base state of a state list: ["TIMEOUT", "COMPLETING"] -> TIMEOUT; ["COMPLETING"] -> COMPLETING."""
    if isinstance(states, str):
        states = [states]
    words = [str(s).upper() for s in states or []]
    if "PENDING" in words and "REQUEUED" in words:
        return "REQUEUED"  # as the text says of a requeued run (sacct -D)
    for w in words:
        if w not in _FLAGS:
            return w
    return words[0] if words else "UNKNOWN"


def _iso(epoch: Any) -> str:
    n = num(epoch)
    if not n:
        return ""
    return datetime.fromtimestamp(int(n), tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _load(text: str, origin: str) -> dict:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(origin, f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise InputError(origin, "not a Slurm JSON answer (no 'jobs' list)")
    errors = [e.get("description") or e.get("error") for e in doc.get("errors") or [] if isinstance(e, dict)]
    if errors:
        raise InputError(origin, "; ".join(str(e) for e in errors))
    return doc


def display_id(job_id: Any, array_job: Any, array_task: Any, het_job: Any, het_offset: Any) -> str:
    """How users write the job: 12 | 10_3 (array task) | 20+1 (component of a heterogeneous job)."""
    aj, at = num(array_job), num(array_task)
    if aj and at is not None:
        return f"{int(aj)}_{int(at)}"
    hj, ho = num(het_job), num(het_offset)
    if hj and ho is not None:
        return f"{int(hj)}+{int(ho)}"
    return str(num(job_id) if num(job_id) is not None else job_id)


def _tres(items: Any) -> str:
    out = []
    for t in items or []:
        if isinstance(t, dict) and t.get("type") and isinstance(t.get("count"), int) and t["count"] >= 0:
            out.append(f"{t['type']}{'/' + t['name'] if t.get('name') else ''}={t['count']}")
    return ",".join(out)


def parse_sacct_json(text: str, origin: str = "sacct --json") -> list[SacctJob]:
    """`sacct --json` to its jobs (steps lend their task count), with the text form's field names. A requeued job
    listed once per run (sacct -D): the last run wins, as in the text."""
    jobs: dict[str, SacctJob] = {}
    for j in _load(text, origin)["jobs"]:
        if not isinstance(j, dict):
            continue
        array, het = j.get("array") or {}, j.get("het") or {}
        time_ = j.get("time") or {}
        state = j.get("state") or {}
        tasks = None
        for s in j.get("steps") or []:
            sid = str(((s.get("step") or {}).get("id")) or "")
            count = num((s.get("tasks") or {}).get("count"))
            if sid.rsplit(".", 1)[-1].isdigit() and count:
                tasks = max(tasks or 0, int(count))
        fields = {
            "JobIDRaw": str(num(j.get("job_id"))), "JobName": j.get("name") or "", "User": j.get("user") or "",
            "JobID": display_id(j.get("job_id"), array.get("job_id"), array.get("task_id"), het.get("job_id"),
                                het.get("job_offset")),
            "Partition": j.get("partition") or "", "State": base_state(state.get("current")),
            "Reason": state.get("reason") or "", "ExitCode": exit_code(j.get("exit_code")) or "",
            "DerivedExitCode": exit_code(j.get("derived_exit_code")) or "",
            "Start": _iso(time_.get("start")), "End": _iso(time_.get("end")), "NodeList": j.get("nodes") or "",
            "NNodes": str(num(j.get("allocation_nodes")) or ""),
            "AllocTRES": _tres((j.get("tres") or {}).get("allocated")), "Cluster": j.get("cluster") or "",
            "WorkDir": j.get("working_directory") or "", "FailedNode": j.get("failed_node") or "",
            "StdOut": j.get("stdout_expanded") or "", "StdErr": j.get("stderr_expanded") or "",
            "Restarts": str(num(j.get("restart_cnt")) or 0),
        }
        jobs[fields["JobIDRaw"]] = SacctJob(job_id=fields["JobIDRaw"], display_id=fields["JobID"],
                                            fields=MappingProxyType(fields), tasks=tasks)
    return list(jobs.values())


def parse_scontrol_job_json(text: str, origin: str = "scontrol show job --json") -> dict[str, str]:
    """`scontrol show job --json <id>` to the dict `scontrol show job -o` gives (its key names), with the base
    state (TIMEOUT, CANCELLED, FAILED...) in JobState even while the job is COMPLETING."""
    jobs = [j for j in _load(text, origin)["jobs"] if isinstance(j, dict)]
    if not jobs:
        return {}
    j = jobs[0]

    def t(key: str) -> str:
        return _iso(j.get(key)) or "Unknown"

    out = {
        "JobId": str(num(j.get("job_id"))), "JobName": j.get("name") or "",
        "UserId": f"{j.get('user_name') or ''}({num(j.get('user_id'))})",
        "JobState": base_state(j.get("job_state")), "Reason": j.get("state_reason") or "None",
        "ExitCode": exit_code(j.get("exit_code")) or "", "StartTime": t("start_time"), "EndTime": t("end_time"),
        "NodeList": j.get("nodes") or "", "NumNodes": str(num(j.get("node_count")) or ""),
        "NumTasks": str(num(j.get("tasks")) or ""), "Partition": j.get("partition") or "",
        "WorkDir": j.get("current_working_directory") or "", "StdOut": j.get("standard_output") or "",
        "StdErr": j.get("standard_error") or "", "Restarts": str(num(j.get("restart_cnt")) or 0),
        "ClusterName": j.get("cluster") or "",
    }
    release = ((_load(text, origin).get("meta") or {}).get("slurm") or {}).get("release")
    if release:
        out["SlurmRelease"] = str(release)
    aj, at = num(j.get("array_job_id")), num(j.get("array_task_id"))
    if aj and at is not None:
        out["ArrayJobId"], out["ArrayTaskId"] = str(aj), str(at)
    if j.get("het_job_id_set") or (num(j.get("het_job_id")) or 0) > 0:
        out["HetJobId"], out["HetJobOffset"] = str(num(j.get("het_job_id"))), str(num(j.get("het_job_offset")))
    return out


__all__ = ["version_of", "json_capable", "num", "exit_code", "base_state", "display_id", "parse_sacct_json",
           "parse_scontrol_job_json"]
