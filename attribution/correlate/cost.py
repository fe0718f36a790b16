"""What a failure cost: GPU-hours lost = GPUs x (end - last checkpoint saved) when the job's output shows a
timestamped checkpoint save (kind checkpoint_saved, rules/checkpoints.yaml), else GPUs x run time. Pure."""

from __future__ import annotations

from typing import Iterable

from attribution.model import Event, ExecutionContext
from attribution.timeparse import format_utc

CHECKPOINT_KIND = "checkpoint_saved"


def job_gpus(ctx: ExecutionContext) -> int:
    """GPUs the job held: GPUs per node (else tasks per node, else one) x nodes."""
    return (ctx.gpus_per_node or ctx.tasks_per_node or 1) * max(1, len(ctx.nodes))


def failure_cost(ctx: ExecutionContext, events: Iterable[Event], outcome: str) -> dict | None:
    """None for a job that did not fail (outcome none) or whose start or end is unknown."""
    if outcome == "none" or ctx.start is None or ctx.end is None or ctx.end < ctx.start:
        return None
    saves = [e.time for e in events if e.kind == CHECKPOINT_KIND and e.time is not None
             and ctx.start <= e.time <= ctx.end]
    gpus = job_gpus(ctx)
    last = max(saves) if saves else None
    since = last or ctx.start
    return {"gpus": gpus, "run_hours": round((ctx.end - ctx.start).total_seconds() / 3600, 4),
            "last_checkpoint": format_utc(last), "basis": "last_checkpoint" if last else "run_time",
            "gpu_hours_lost": round(gpus * (ctx.end - since).total_seconds() / 3600, 4)}
