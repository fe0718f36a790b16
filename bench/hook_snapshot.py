"""What the counter snapshot costs the prolog and the clean-job epilog, on a faked node with 8 GPUs and 8 HCAs.

The sysfs trees are faked under a temporary root (tests/harness/fakenode.py, the kernel's documented layout) and
`nvidia-smi` is a script printing a real-format 8-GPU document, so the figure is the hooks' own cost (processes,
greps, file writes), not the real nvidia-smi's (which queries the driver: measure it on a node with
`time nvidia-smi -q -x >/dev/null`). Each hook runs as slurmd runs it (a fresh bash, no PATH), N times in turn with
ATTRIBUTION_TELEMETRY=on and off, and with ATTRIBUTION_GPU_TOOL=nvml (the node agent reading a fake
libnvidia-ml through the real pynvml: Python's start and the bindings' cost, not the driver's); the figures are
medians of wall time and of the CPU time of the hook and its children (os.wait4 rusage).

    .venv/bin/python -m bench.hook_snapshot [N]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.fakenode import GPU_BUSES, FakeNode  # noqa: E402


def run(hook: str, env: dict[str, str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen([str(ROOT / "hooks" / hook)], env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    assert os.waitstatus_to_exitcode(status) == 0
    return wall * 1000, (ru.ru_utime + ru.ru_stime) * 1000


def main(n: int = 30) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        node = FakeNode(base / "root")
        (base / "kern.log").write_text("")
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        # ATTRIBUTION_GPU_TOOL=nvml: the node agent's `nvml-snapshot` over the real pynvml and a fake library
        spec = base / "gpus.json"
        spec.write_text(json.dumps([{"bus": b} for b in GPU_BUSES]))
        nvml_bin = base / "attribution-nvml"
        nvml_bin.write_text(f"#!/bin/sh\ncase $1 in nvml-snapshot) ;; *) exit 1 ;; esac\ncd {ROOT} && exec "
                            f"{sys.executable} -m tests.harness.fakenvml {spec} \"$@\"\n")
        nvml_bin.chmod(0o755)
        for i in range(n):
            for telemetry in ("on", "off", "nvml"):
                env_file = base / f"hook-{telemetry}.env"
                tool = "nvml" if telemetry == "nvml" else "nvidia-smi"
                on = "off" if telemetry == "off" else "on"
                env_file.write_text(node.hook_env() + f"ATTRIBUTION_TELEMETRY={on}\n"
                                    f"ATTRIBUTION_STATE_DIR={base}/state\nATTRIBUTION_LOG={base}/hooks.log\n"
                                    f"ATTRIBUTION_KERNEL_SOURCE=file\nATTRIBUTION_KERNEL_FILE={base}/kern.log\n"
                                    f"ATTRIBUTION_FM_LOG={base}/no-fm.log\nATTRIBUTION_GPU_TOOL={tool}\n"
                                    f"ATTRIBUTION_BIN={nvml_bin if tool == 'nvml' else '/bin/false'}\n")
                env = {"SLURM_JOB_ID": str(1000 + i), "SLURM_JOB_EXIT_CODE": "0",
                       "ATTRIBUTION_HOOK_ENV": str(env_file)}
                for hook in ("prolog", "epilog"):
                    results.setdefault((hook, telemetry), []).append(run(hook, env))
        assert not list((base / "state").glob("job-*")), "the clean epilog left state behind"
        assert not (base / "hooks.log").exists(), "the clean epilog started attribution"
    print(f"faked node: 8 GPUs, 8 HCAs (1 port each), 48 PCI devices; {n} runs each, medians")
    for (hook, telemetry), rs in sorted(results.items()):
        print(f"  {hook:6s} telemetry={telemetry:3s}: wall {statistics.median(r[0] for r in rs):6.1f} ms, "
              f"cpu {statistics.median(r[1] for r in rs):6.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
