"""Generated histories for the replay tests: failed jobs whose kernel line no shipped rule knows, and a copy of
the rule pack with one rule added for it."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from .logs import write_context

UNKNOWN_LINE = "NVRM: GPU at PCI:0000:3b:00: flux regulator failure, GPU halted"
NEW_RULE = {
    "id": "kernel.flux_regulator_failure",
    "source": "kernel",
    "description": "Test rule: a GPU fault the shipped pack does not know (the replay tests add it).",
    "pattern": r"NVRM: GPU at PCI:(?P<gpu>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): flux regulator failure",
    "kind": "gpu_fallen_off_bus",
    "examples": {
        "match": [{"line": f"[ 4120.000001] {UNKNOWN_LINE}", "ref": "RECON test line",
                   "expect": {"kind": "gpu_fallen_off_bus", "gpu": "0000:3b:00"}}],
        "no_match": ["NVRM: GPU at PCI:0000:3b:00: flux regulator ok"],
    },
}


def pack_with_new_rule(root: Path, dest: Path) -> Path:
    shutil.copytree(root / "rules", dest)
    path = dest / "kernel.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["rules"].append(NEW_RULE)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return dest


def failed_job_bundle(path: Path, job_id: str, node: str, kernel_lines: list[str], end: str = "2026-03-10T10:00:00Z",
                      job_lines: tuple[str, ...] = (), state: str = "FAILED", start: str = "2026-03-10T08:00:00Z",
                      gpus: int = 8, **ctx) -> Path:
    """One single-node failed job; kernel lines as dmesg -T lines (times at the end of the job)."""
    write_context(path, job_id=job_id, nodes=node, state=state, start=start, end=end, gpus_per_node=gpus, **ctx)
    kdir = path / "nodes" / node
    kdir.mkdir(parents=True, exist_ok=True)
    stamp = end.replace("T", " ").replace("Z", "")
    (kdir / "kernel.log").write_text("".join(f"{stamp} {node} kernel: {ln}\n" for ln in
                                             ["usb 1-1: new high-speed USB device number 2"] + kernel_lines))
    (path / "job").mkdir(exist_ok=True)
    (path / "job" / f"slurm-{job_id}.out").write_text(
        "".join(f"[2026-03-10 08:0{i}:00] step {i} loss 1.0\n" for i in range(3)) + "".join(
            f"{ln}\n" for ln in job_lines))
    return path
