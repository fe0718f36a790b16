"""Benchmark data: large job logs and kernel logs with realistic noise and rare fault lines, written fast.

Noise is drawn from shapes of healthy logs (NCCL INFO lines, training progress, PyTorch warnings, mlx5 link
state, audit); fault lines (NCCL WARN, watchdog timeouts, CUDA errors, Xid lines) are inserted at the given rate.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

UTC = timezone.utc
START = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
END = START + timedelta(hours=6)
NODES = tuple(f"g{i:03d}" for i in range(1, 9))

JOB_NOISE = (
    "{r:3d}: {h}:{p}:{t} [{d}] NCCL INFO Channel {c:02d}/0 : {r}[{d}] -> {q}[{d}] via P2P/IPC",
    "{r:3d}: {h}:{p}:{t} [{d}] NCCL INFO comm 0x55d0{p:08x} rank {r} nranks 64 cudaDev {d} busId {b:x}000 - Init COMPLETE",
    "{r:3d}: {h}:{p}:{t} [{d}] NCCL INFO Connected all rings",
    "{r:3d}: [{ts}][train][INFO] step {s} loss {l:.4f} lr 1.50e-04 grad_norm 0.{u} tokens/s {m}",
    "{r:3d}: [rank{r}]:[W310 08:02:47.201303544 ProcessGroupNCCL.cpp:3943] [PG 0 Rank {r}]  using GPU {d} to perform "
    "barrier as devices used by this process are currently unknown.",
    "{r:3d}: {{'loss': {l:.4f}, 'grad_norm': 0.{u}, 'learning_rate': 1.667e-06, 'epoch': 0.{s}}}",
    "{r:3d}: [{ts}][data][INFO] loaded shard {s:06d}.tar in {u} ms ({m} samples/s)",
)
JOB_FAULTS = (
    "{r:3d}: {h}:{p}:{t} [{d}] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.1.0.{u}<4242> "
    "with error 12, opcode 0, len 0, vendor err 129 (Recv)",
    "{r:3d}: [rank{r}]:[E310 09:24:36.943220249 ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600325 milliseconds before timing out.",
    "{r:3d}: [rank{r}]: RuntimeError: CUDA error: unspecified launch failure",
    "{r:3d}: {h}:{p}:{t} [{d}] enqueue.cc:1460 NCCL WARN Cuda failure 719 'unspecified launch failure'",
)
KERNEL_NOISE = (
    "mlx5_core 0000:{b:02x}:00.0 mlx5_{i}: Port: 1 Link ACTIVE",
    "nvidia-nvswitch{i}: open (major=510)",
    "audit: type=1400 audit({e}.{u:03d}:{m}): apparmor=\"DENIED\" operation=\"open\" profile=\"snap\" pid={m}",
    "EXT4-fs (nvme0n1p{i}): re-mounted. Opts: (null). Quota mode: none.",
    "perf: interrupt took too long ({m} > {u}), lowering kernel.perf_event_max_sample_rate to {m}",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ibp{b}s0: link becomes ready",
    "systemd-journald[{m}]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0",
)
KERNEL_FAULTS = (
    "NVRM: Xid (PCI:0000:{b:02x}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for "
    "remapping, reset gpu to activate.",
    "NVRM: Xid (PCI:0000:{b:02x}:00): 45, pid={m}, name=python3, Ch 00000010",
)
XID79 = "NVRM: Xid (PCI:0000:9d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _ctime(t: datetime) -> str:
    return f"[{t.strftime('%a %b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}]"


def _noise_pool(rng: random.Random, templates, n: int, **fixed) -> list[str]:
    out = []
    for k in range(n):
        r = rng.randrange(64)
        out.append(rng.choice(templates).format(
            r=r, q=(r + 1) % 64, d=r % 8, h=NODES[r // 8], p=rng.randrange(100000, 4000000),
            t=rng.randrange(100000, 4000000), c=rng.randrange(32), b=rng.randrange(16, 255), u=rng.randrange(1000),
            m=rng.randrange(100000, 9000000), s=k, l=rng.random() * 3, i=rng.randrange(8), e=1796020000 + k,
            ts=(START + timedelta(seconds=k)).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3], **fixed) + "\n")
    return out


def write_job_log(path: Path, size_bytes: int, fault_rate: float, seed: int = 1) -> int:
    """A job output of about `size_bytes` with fault lines at `fault_rate`; returns the number of fault lines."""
    rng = random.Random(seed)
    noise = _noise_pool(rng, JOB_NOISE, 50_000)
    faults = _noise_pool(rng, JOB_FAULTS, 2_000)
    every = max(1, int(1 / fault_rate)) if fault_rate else 0
    written = 0
    n_faults = 0
    line_no = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        while written < size_bytes:
            chunk = []
            for _ in range(20_000):
                line_no += 1
                if every and line_no % every == 0:
                    s = rng.choice(faults)
                    n_faults += 1
                else:
                    s = noise[rng.randrange(len(noise))]
                chunk.append(s)
            data = "".join(chunk)
            f.write(data)
            written += len(data)
    return n_faults


def write_kernel_log(path: Path, lines: int, fault_rate: float, seed: int = 2, xid79_at: int | None = None,
                     start: datetime | None = None, end: datetime | None = None, append: bool = False) -> int:
    """`lines` kernel lines stamped evenly from `start` to `end` (default: an hour before START to an hour after
    END), fault lines at `fault_rate`, an Xid 79 at line `xid79_at`, written to `path` or added to its end;
    returns the number of fault lines."""
    rng = random.Random(seed)
    every = max(1, int(1 / fault_rate)) if fault_rate else 0
    t0 = start or START - timedelta(hours=1)
    step = ((end or END + timedelta(hours=1)) - t0).total_seconds() / max(lines, 1)
    noise = [t.format(b=rng.randrange(16, 255), i=rng.randrange(8), e=1796020000 + k, u=rng.randrange(1000),
                      m=rng.randrange(100000, 9000000)) for k, t in enumerate(KERNEL_NOISE * 2000)]
    n_faults = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w") as f:
        buf = []
        for i in range(lines):
            t = t0 + timedelta(seconds=i * step)
            if xid79_at is not None and i == xid79_at:
                msg = XID79
                n_faults += 1
            elif every and i % every == every - 1:
                msg = rng.choice(KERNEL_FAULTS).format(b=rng.randrange(16, 255), m=rng.randrange(100000, 9000000))
                n_faults += 1
            else:
                msg = noise[rng.randrange(len(noise))]
            buf.append(f"{_ctime(t)} {msg}\n")
            if len(buf) >= 10_000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
    return n_faults


def write_context(bundle: Path, nodes=NODES, state: str = "FAILED") -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "context.yaml").write_text(yaml.safe_dump({
        "scheduler": "slurm", "cluster": "bench", "job_id": "1", "state": state, "exit_code": "1:0",
        "nodes": list(nodes), "tasks_per_node": 8, "start": START.isoformat(), "end": END.isoformat()}))
