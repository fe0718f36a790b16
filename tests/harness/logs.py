"""Generators of realistic log noise and of small bundles, for tests and benchmarks.

Noise lines are shapes seen in real healthy logs (boot messages, mlx5 link state, NCCL INFO, training
progress); fault lines are inserted by the caller at chosen positions.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

UTC = timezone.utc

KERNEL_NOISE = (
    "mlx5_core 0000:{b:02x}:00.0 mlx5_{i}: Port: 1 Link ACTIVE",
    "nvidia-nvswitch{i}: open (major=510)",
    "audit: type=1400 audit({s}.{u:03d}:{n}): apparmor=\"DENIED\" operation=\"open\" profile=\"snap\" pid={n}",
    "EXT4-fs (nvme0n1p{i}): re-mounted. Opts: (null). Quota mode: none.",
    "perf: interrupt took too long ({n} > {u}), lowering kernel.perf_event_max_sample_rate to {n}",
    "NVRM: GPU at PCI:0000:{b:02x}:00: GPU-{u:08x}-b600-ac93-3616-d754b23d636d",
    "Lustre: Mounted lustre-client",
    "systemd-journald[{n}]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ibp{b}s0: link becomes ready",
)

JOB_NOISE = (
    "{r:2d}: {h}:{n}:{m} [{d}] NCCL INFO Channel 0{d}/0 : {r}[{d}] -> {q}[{d}] via P2P/IPC",
    "{r:2d}: {h}:{n}:{m} [{d}] NCCL INFO comm 0x55d0{n:08x} rank {r} nranks 32 cudaDev {d} busId {b:x}000 - Init COMPLETE",
    "{r:2d}: [{ts}][train][INFO] step {n} loss {l:.4f} lr 1.50e-04 grad_norm 0.{u} tokens/s {m}",
    "{r:2d}: [rank{r}]:[W310 08:02:47.201303544 ProcessGroupNCCL.cpp:3943] [PG 0 Rank {r}]  using GPU {d} to perform barrier as devices used by this process are currently unknown.",
    "{r:2d}: {{'loss': {l:.4f}, 'grad_norm': 0.{u}, 'learning_rate': 1.667e-06, 'epoch': 0.01}}",
)


def dmesg_t(t: datetime, msg: str) -> str:
    return f"[{t.strftime('%a %b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}] {msg}"


def kernel_noise(rng: random.Random, t: datetime, n: int) -> str:
    tpl = rng.choice(KERNEL_NOISE)
    return dmesg_t(t, tpl.format(b=rng.randrange(256), i=rng.randrange(8), s=int(t.timestamp()),
                                 u=rng.randrange(1000), n=rng.randrange(1, 99999)))


def job_noise(rng: random.Random, t: datetime, host: str) -> str:
    tpl = rng.choice(JOB_NOISE)
    r = rng.randrange(32)
    return tpl.format(r=r, q=(r + 1) % 32, d=r % 8, h=host, n=rng.randrange(100000, 4000000),
                      m=rng.randrange(100000, 4000000), b=rng.randrange(16, 255), u=rng.randrange(1000),
                      l=rng.random() * 3, ts=t.strftime("%Y-%m-%d %H:%M:%S,%f")[:-3])


def write_kernel_log(path: Path, start: datetime, seconds: float, lines: int, seed: int = 1,
                     inserts: dict[int, str] | None = None) -> None:
    """A dmesg -T log of `lines` noise lines spread over `seconds`, with `inserts` (index -> message)."""
    rng = random.Random(seed)
    inserts = inserts or {}
    step = seconds / max(lines, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(lines):
            t = start + timedelta(seconds=i * step)
            if i in inserts:
                f.write(dmesg_t(t, inserts[i]) + "\n")
            else:
                f.write(kernel_noise(rng, t, i) + "\n")


def write_context(bundle: Path, **fields) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    data = {"scheduler": "slurm", "cluster": "test", "job_id": "1", "user": "u", "partition": "gpu",
            "state": "FAILED", "exit_code": "1:0", "nodes": "g[01-04]", "tasks_per_node": 8,
            "start": "2026-03-10T08:00:00Z", "end": "2026-03-10T10:00:00Z", "timezone": "UTC"}
    data.update(fields)
    (bundle / "context.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def utc(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).astimezone(UTC)
