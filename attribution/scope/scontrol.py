"""Reading `scontrol show job`: the one way the code asks slurmctld about a job. One runner with its time and
byte bounds (`show_job_text`), the text form (`show_job`, parsed by `slurm.parse_scontrol_job`), the JSON form of
Slurm 23.02+ (`show_job_json`, parsed by `slurmjson.parse_scontrol_job_json`), and the text a hook already
fetched (`read_show_job`). Drains and node states go through `drain/`.

A job's record is a few kilobytes; what users named things (job name, comment, paths) may be any bytes, so the
answer is read bounded and decoded with replacement. Every failure is `{}` (the caller falls back to the
environment): an epilog never fails because slurmctld did not answer.
"""

from __future__ import annotations

from typing import Mapping

from attribution.command import run_command
from attribution.scope.slurm import parse_scontrol_job

SCONTROL = "/usr/bin/scontrol"
#: seconds for one call from a hook (the controller epilog's budget is shared with reading the job's output)
TIMEOUT = 5.0
#: at most this much of one answer is read: a job's record, with room for long user-chosen names
MAX_BYTES = 1 << 20


def show_job_text(job_id: str, *options: str, scontrol: str = SCONTROL, timeout: float = TIMEOUT,
                  max_bytes: int = MAX_BYTES) -> str | None:
    """`scontrol show job [options] <id>`, at most `max_bytes` of it, within `timeout`; None when it failed."""
    r = run_command([scontrol, "show", "job", *options, str(job_id)], timeout=timeout)
    try:
        return r.stdout.read(max_bytes).decode("utf-8", "replace") if r.ok else None
    finally:
        r.stdout.close()


def show_job(job_id: str, scontrol: str = SCONTROL, timeout: float = TIMEOUT) -> dict[str, str]:
    """`scontrol show job -o <id>` as a dict of its Key=Value pairs; {} when it failed."""
    text = show_job_text(job_id, "-o", scontrol=scontrol, timeout=timeout)
    return parse_scontrol_job(text) if text else {}


def show_job_json(job_id: str, scontrol: str = SCONTROL, timeout: float = TIMEOUT) -> dict[str, str]:
    """`scontrol show job --json <id>` where Slurm has a trustworthy one (23.02+, read from the answer's own
    version), as the dict the text form gives: inside EpilogSlurmctld its state list already says TIMEOUT or
    CANCELLED where the text says COMPLETING (measured on 24.11.5). {} on 22.05, on any failure."""
    from attribution.errors import InputError
    from attribution.scope.slurmjson import json_capable, parse_scontrol_job_json, version_of

    text = show_job_text(job_id, "--json", scontrol=scontrol, timeout=timeout)
    if not text or not text.lstrip().startswith("{"):
        return {}
    try:
        info = parse_scontrol_job_json(text)
    except InputError:
        return {}
    return info if json_capable(version_of(info.get("SlurmRelease", ""))) else {}


def read_show_job(path: str) -> Mapping[str, str] | None:
    """The `scontrol show job -o` answer a hook saved to `path` (the controller hook's one RPC), read as
    `show_job` reads a live one; None when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            return parse_scontrol_job(f.read(MAX_BYTES).decode("utf-8", "replace"))
    except OSError:
        return None


__all__ = ["SCONTROL", "TIMEOUT", "MAX_BYTES", "show_job_text", "show_job", "show_job_json", "read_show_job"]
