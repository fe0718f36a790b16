"""A large failed job, generated: 64 nodes x 8 ranks, a GPU off the bus on one node, and 20,000+ symptom lines.

The lines are in the formats real jobs print (dmesg -T kernel lines, srun --label PyTorch/NCCL output) and go
through the normal pipeline; `big_job()` returns a fleetgen.GeneratedJob that fleetgen.write_bundle writes out.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from attribution.fleetgen import GeneratedJob

UTC = timezone.utc
NODES = tuple(f"gpu{i:03d}" for i in range(1, 65))
CULPRIT, CULPRIT_GPU = "gpu037", "0000:9d:00"
RANKS_PER_NODE = 8
WATCHDOG_LINES_PER_RANK = 37  # one per process group / collective still in flight


def _dmesg_t(t: datetime) -> str:
    return f"[{t.strftime('%a %b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}]"


def _glog(t: datetime) -> str:
    return f"E{t.month}{t.day:02d} {t.strftime('%H:%M:%S')}.{t.microsecond:06d}000"


def big_job(start: datetime | None = None, seed: int = 7) -> tuple[GeneratedJob, datetime]:
    """The job and the time its GPU fell off the bus (the expected root cause)."""
    rng = random.Random(seed)
    start = (start or datetime(2026, 10, 14, 6, 0, 0, tzinfo=UTC)).astimezone(UTC)
    end = start + timedelta(hours=3)
    fault = end - timedelta(minutes=25)
    job = GeneratedJob("8800123", "perf", NODES, start, end, "FAILED", "134:0", "gpu_hardware")
    for n in NODES:
        job.kernel[n] = [f"{_dmesg_t(start)} mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link ACTIVE"]
    job.kernel[CULPRIT].append(f"{_dmesg_t(fault)} NVRM: Xid (PCI:{CULPRIT_GPU}): 79, pid='<unknown>', "
                               f"name=<unknown>, GPU has fallen off the bus.")
    out = []
    ranks = len(NODES) * RANKS_PER_NODE
    for r in range(ranks):
        t = fault + timedelta(seconds=30 + rng.uniform(0, 60))
        out.append(f"{r:3d}: [rank{r}]:[{_glog(t)} ProcessGroupNCCL.cpp:1515] [PG 0 Rank {r}] Process group "
                   f"watchdog thread terminated with exception: NCCL error: remote process exited or there was a "
                   f"network error, NCCL version 2.20.5")
        for k in range(WATCHDOG_LINES_PER_RANK):
            t = fault + timedelta(seconds=600 + k * 15 + rng.uniform(0, 12))
            out.append(f"{r:3d}: [rank{r}]:[{_glog(t)} ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
                       f"collective operation timeout: WorkNCCL(SeqNum={4242 + k}, OpType=ALLREDUCE, "
                       f"NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for {600000 + k * 15000} "
                       f"milliseconds before timing out.")
        t = fault + timedelta(seconds=1200 + rng.uniform(0, 30))
        out.append(f"{r:3d}: [rank{r}]:[{_glog(t)} ProcessGroupNCCL.cpp:1515] [PG 0 Rank {r}] Process group "
                   f"watchdog thread terminated with exception: NCCL error: unhandled system error, NCCL version "
                   f"2.20.5")
    for r in range(ranks):
        out.append(f"srun: error: {NODES[r // RANKS_PER_NODE]}: task {r}: Exited with exit code 1")
    job.job_output = out
    return job, fault
