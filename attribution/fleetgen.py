"""A generated multi-week history of a small GPU fleet, as incident bundles, for the demo, tests and benchmarks.

The story is fixed (a seed only moves times and noise): over `weeks` weeks a 64-node fleet runs jobs; most
finish, some fail in their own code or hit their time limit, and a few nodes are lemons:
  - NVLINK_NODE has a fatal NVLink error (Xid 74) on the same GPU in five different weeks;
  - ECC_NODE's GPU ECC_GPU reports an uncorrectable ECC error (Xid 48) three times;
  - BUS_NODE loses a GPU off the PCIe bus (Xid 79) in the last week;
  - IB_NODE's InfiniBand port goes down once.
Every failure is written as real-format log lines (dmesg -T kernel logs, srun --label job output) and goes
through the normal pipeline. `write_bundle` is the only function here that touches the file system.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

UTC = timezone.utc
CLUSTER = "demo"
NODES = tuple(f"dgx{i:03d}" for i in range(1, 65))
GPUS = ("0000:1b:00", "0000:43:00", "0000:52:00", "0000:61:00", "0000:9d:00", "0000:c3:00", "0000:d1:00",
        "0000:df:00")
NVLINK_NODE, NVLINK_GPU, NVLINK_WEEKS = "dgx017", "0000:52:00", (0, 1, 3, 5, 6)
ECC_NODE, ECC_GPU, ECC_WEEKS = "dgx042", "0000:9d:00", (1, 4, 7)
BUS_NODE, BUS_GPU = "dgx033", "0000:c3:00"
IB_NODE, IB_WEEK = "dgx050", 2
USERS = ("alice", "bob", "chen", "dana", "emil", "fatima")
TASKS_PER_NODE = 8


@dataclass
class GeneratedJob:
    job_id: str
    user: str
    nodes: tuple[str, ...]
    start: datetime
    end: datetime
    state: str
    exit_code: str
    story: str  # what really happened: the expected outcome
    kernel: dict[str, list[str]] = field(default_factory=dict)  # node -> lines
    job_output: list[str] = field(default_factory=list)


def _ctime(t: datetime) -> str:
    return f"[{t.strftime('%a %b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}]"


def _boot_noise(t: datetime, node: str) -> list[str]:
    return [f"{_ctime(t)} mlx5_core 0000:18:00.0 mlx5_0: Port: 1 Link ACTIVE",
            f"{_ctime(t)} nvidia-nvswitch0: open (major=510)"]


def _watchdogs(nodes: tuple[str, ...], t: datetime, skip_rank: int | None = None) -> list[str]:
    out = []
    for r in range(len(nodes) * TASKS_PER_NODE):
        if r == skip_rank:
            continue
        stamp = f"E{t.month}{t.day:02d} {t.strftime('%H:%M:%S')}.{r:06d}000"
        out.append(f"{r:2d}: [rank{r}]:[{stamp} ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
                   f"operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
                   f"Timeout(ms)=600000) ran for 600{r:03d} milliseconds before timing out.")
    return out


def history(weeks: int = 8, end: datetime | None = None, seed: int = 1, jobs_per_week: int = 12) -> list[GeneratedJob]:
    """The jobs of the fleet's history, the last week ending at `end` (default: now)."""
    rng = random.Random(seed)
    end = (end or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    first_week = end - timedelta(weeks=weeks)
    jobs: list[GeneratedJob] = []
    job_no = 100000
    for w in range(weeks):
        week_start = first_week + timedelta(weeks=w)
        specials = []
        if w in NVLINK_WEEKS:
            specials.append("nvlink")
        if w in ECC_WEEKS:
            specials.append("ecc")
        if w == weeks - 1:
            specials.append("bus")
        if w == IB_WEEK:
            specials.append("ib")
        specials += ["app", "timeout"]
        plan = specials + ["ok"] * max(0, jobs_per_week - len(specials))
        for slot, kind in enumerate(plan):
            job_no += 1
            start = week_start + timedelta(hours=slot * 12 + rng.randrange(0, 6), minutes=rng.randrange(60))
            jobs.append(_job(kind, str(job_no), start, rng))
    return jobs


def _pick_nodes(rng: random.Random, must: str | None = None) -> tuple[str, ...]:
    pool = [n for n in NODES if n not in (NVLINK_NODE, ECC_NODE, BUS_NODE, IB_NODE)]
    chosen = rng.sample(pool, 4 if must is None else 3)
    if must:
        chosen.append(must)
    return tuple(sorted(chosen))


def _job(kind: str, job_id: str, start: datetime, rng: random.Random) -> GeneratedJob:
    user = rng.choice(USERS)
    duration = timedelta(hours=rng.randrange(2, 8))
    fault_at = start + duration - timedelta(minutes=11)
    end = start + duration
    if kind == "nvlink":
        nodes = _pick_nodes(rng, NVLINK_NODE)
        j = GeneratedJob(job_id, user, nodes, start, end, "FAILED", "134:0", "nvlink")
        j.kernel[NVLINK_NODE] = _boot_noise(start, NVLINK_NODE) + [
            f"{_ctime(fault_at)} NVRM: Xid (PCI:{NVLINK_GPU}): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
            f"error detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"]
        j.job_output = _watchdogs(nodes, fault_at + timedelta(minutes=10))
    elif kind == "ecc":
        nodes = _pick_nodes(rng, ECC_NODE)
        j = GeneratedJob(job_id, user, nodes, start, end, "FAILED", "1:0", "gpu_hardware")
        j.kernel[ECC_NODE] = _boot_noise(start, ECC_NODE) + [
            f"{_ctime(fault_at)} NVRM: Xid (PCI:{ECC_GPU}): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
            f"double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 1."]
        rank = nodes.index(ECC_NODE) * TASKS_PER_NODE + GPUS.index(ECC_GPU)
        j.job_output = [f"{rank:2d}: [rank{rank}]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
        j.job_output += _watchdogs(nodes, fault_at + timedelta(minutes=10), skip_rank=rank)
    elif kind == "bus":
        nodes = _pick_nodes(rng, BUS_NODE)
        j = GeneratedJob(job_id, user, nodes, start, end, "FAILED", "134:0", "gpu_hardware")
        j.kernel[BUS_NODE] = _boot_noise(start, BUS_NODE) + [
            f"{_ctime(fault_at)} NVRM: Xid (PCI:{BUS_GPU}): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
            f"off the bus."]
        j.job_output = _watchdogs(nodes, fault_at + timedelta(minutes=10))
    elif kind == "ib":
        nodes = _pick_nodes(rng, IB_NODE)
        j = GeneratedJob(job_id, user, nodes, start, end, "FAILED", "134:0", "network")
        j.kernel[IB_NODE] = _boot_noise(start, IB_NODE) + [
            f"{_ctime(fault_at)} mlx5_core 0000:bd:00.0 mlx5_5: Port: 1 Link DOWN"]
        j.job_output = [f"{r:2d}: {nodes[0]}:4242:4300 [5] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
                        f"from peer 10.0.0.50<47554> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
                        for r in (5, 13)]
    elif kind == "app":
        nodes = _pick_nodes(rng)
        j = GeneratedJob(job_id, user, nodes, start, end, "FAILED", "1:0", "application")
        j.job_output = [" 3: [rank3]: Traceback (most recent call last):",
                        ' 3: [rank3]:   File "/home/u/train.py", line 88, in <module>',
                        " 3: [rank3]: ValueError: expected input batch_size (64) to match target batch_size (32)"]
        j.job_output += _watchdogs(nodes, end - timedelta(seconds=30), skip_rank=3)
    elif kind == "timeout":
        nodes = _pick_nodes(rng)
        j = GeneratedJob(job_id, user, nodes, start, end, "TIMEOUT", "0:0", "scheduler")
        j.job_output = [f"slurmstepd: error: *** JOB {job_id} ON {nodes[0]} CANCELLED AT "
                        f"{(end - timedelta(seconds=30)).strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***"]
    else:
        nodes = _pick_nodes(rng)
        j = GeneratedJob(job_id, user, nodes, start, end, "COMPLETED", "0:0", "none")
        j.job_output = [f" 0: [{start.strftime('%Y-%m-%d %H:%M:%S')},000][train][INFO] step 1 loss 2.31"]
    for n in nodes:
        j.kernel.setdefault(n, _boot_noise(start, n))
    return j


def context_of(job: GeneratedJob) -> dict:
    return {"scheduler": "slurm", "cluster": CLUSTER, "job_id": job.job_id, "user": job.user, "partition": "train",
            "state": job.state, "exit_code": job.exit_code, "nodes": list(job.nodes),
            "tasks_per_node": TASKS_PER_NODE, "start": job.start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end": job.end.strftime("%Y-%m-%dT%H:%M:%SZ"), "timezone": "UTC", "gpus_per_node": 8}


def write_bundle(job: GeneratedJob, folder: Path) -> Path:
    b = folder / f"{CLUSTER}-{job.job_id}"
    (b / "job").mkdir(parents=True, exist_ok=True)
    (b / "context.yaml").write_text(yaml.safe_dump(context_of(job), sort_keys=False))
    for node, lines in job.kernel.items():
        (b / "nodes" / node).mkdir(parents=True, exist_ok=True)
        (b / "nodes" / node / "kernel.log").write_text("\n".join(lines) + "\n")
    (b / "job" / f"slurm-{job.job_id}.out").write_text("\n".join(job.job_output) + "\n")
    return b
