"""The observation document a node sends: what it read of one job, as the tools wrote it.

    {"format": FORMAT,
     "reporter": {"role": "node", "name": <node>, "agent": "attribution-node <version>", "filter": <sha256>},
     "cluster": <name>,
     "slurm": {<the epilog environment's SLURM_* values, SLURM_KEYS only>},
     "times": {"now": <epoch>, "prolog_start": <epoch> | null, "boot": <epoch> | null,
               "lookback": <seconds: the window when neither Slurm nor the prolog says when the job started>,
               "zone": <this node's time zone: an IANA name, or an offset such as +09:00>},
     "logs": [{"source": "kernel" | "fabricmanager", "origin": "journald" | <path>, "status": "ok" | "empty" |
               "missing" | "error", "reason": ..., "notes": [...], "lines": <lines read>, "bytes": <bytes read>,
               "cut": <kept lines stopped at the bound>, "blocks": [[<first line's number>, [<line>, ...]], ...]}],
     "counters": {"prolog": {<file>: <text>}, "epilog": {...}, "folder": <where>}}

The centre decodes it in one place (attribution/intake/codec.py) whether it arrives over HTTP or from a spool; the
format string names this layout and changes with it.

Standard library only, as everything in attribution/node.
"""

from __future__ import annotations

__all__ = ["FORMAT", "SLURM_KEYS", "node_document", "slurm_values"]

FORMAT = "attribution.observations/1"
#: What of the epilog's environment a node report carries: the job's identity, placement, exit and times (never
#: the job's output paths or working directory: a node reads none of the job's own files)
SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_SCRIPT_CONTEXT", "SLURMD_NODENAME", "SLURM_JOB_NODELIST",
              "SLURM_NODELIST", "SLURM_JOB_EXIT_CODE", "SLURM_JOB_EXIT_CODE2", "SLURM_CLUSTER_NAME",
              "SLURM_JOB_USER", "SLURM_JOB_PARTITION", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME",
              "SLURM_JOB_GPUS", "SLURM_JOB_NAME", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_HET_JOB_ID",
              "SLURM_JOB_RESTART_COUNT")
MAX_VALUE = 4096


def slurm_values(environ) -> dict:
    """SLURM_KEYS of an environment, each at most MAX_VALUE characters."""
    return {k: str(environ[k])[:MAX_VALUE] for k in SLURM_KEYS if environ.get(k) not in (None, "")}


def node_document(node: str, cluster: str | None, slurm: dict, now: float, prolog_start: float | None,
                  boot: float | None, lookback: int, zone: str | None, logs: list, counters: dict, agent: str,
                  filter_digest: str | None) -> dict:
    doc = {"format": FORMAT,
           "reporter": {"role": "node", "name": node, "agent": agent, "filter": filter_digest},
           "cluster": cluster, "slurm": slurm,
           "times": {"now": now, "prolog_start": prolog_start, "boot": boot, "lookback": lookback, "zone": zone},
           "logs": logs}
    if counters:
        doc["counters"] = counters
    return doc
