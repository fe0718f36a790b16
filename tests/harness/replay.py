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


XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID74 = ("NVRM: Xid (PCI:0000:3b:00): 74, pid=1234, name=python, NVLink: fatal error detected on link 3"
         "(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
TRACEBACK = ("Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "ValueError: bad shape")


def drain_history(root: Path) -> list[Path]:
    """A day on cluster `test` (8 GPUs per node, one node per job), 2026-03-10:
    g01: job 201 00:00-02:00 Xid 79; job 202 05:00-07:00 Xid 79 again.
    g02: job 211 01:00-03:00 Xid 74; job 212 08:00-10:00 Xid 74; job 213 12:00-14:00 Xid 74.
    g03: job 221 and 222, application errors (a Traceback) 02:00-04:00 and 06:00-09:00."""
    d = "2026-03-10T"
    spec = [("201", "g01", "00:00", "02:00", [XID79], ()), ("202", "g01", "05:00", "07:00", [XID79], ()),
            ("211", "g02", "01:00", "03:00", [XID74], ()), ("212", "g02", "08:00", "10:00", [XID74], ()),
            ("213", "g02", "12:00", "14:00", [XID74], ()), ("221", "g03", "02:00", "04:00", [], TRACEBACK),
            ("222", "g03", "06:00", "09:00", [], TRACEBACK)]
    return [failed_job_bundle(root / job, job, node, kernel, start=f"{d}{s}:00Z", end=f"{d}{e}:00Z",
                              job_lines=out) for job, node, s, e, kernel, out in spec]
