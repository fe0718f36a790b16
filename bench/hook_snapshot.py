"""What the counter snapshot costs the prolog and the clean-job epilog, on a faked node with 8 GPUs and 8 HCAs.

The sysfs trees are faked (tests/harness/fakenode.py, the kernel's documented layout) and `nvidia-smi` is a script
printing a real-format 8-GPU document, so the figure is the hooks' own cost (processes, greps, file writes), not
the real nvidia-smi's (which queries the driver: measure it on a node with `time nvidia-smi -q -x >/dev/null`).
Each hook is the installed one (this checkout's wheel, bench/nodeside.py), run as slurmd runs it (no PATH, hook.env
read as data from a folder only root can change), N times in turn with ATTRIBUTION_TELEMETRY=on and off; the
figures are medians of wall time and of the CPU time of the hook and everything it started (a cgroup of its own,
bench/cpu.py).

    .venv/bin/python -m bench.hook_snapshot [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cpu import CpuMeter  # noqa: E402
from bench.nodeside import BenchNode, SafeRoot, fake_node, install_node, job_window, write_private  # noqa: E402


def main(n: int = 30) -> None:
    meter = CpuMeter()
    with tempfile.TemporaryDirectory(prefix="attribution-bench-") as tmp:
        install = install_node(Path(tmp))
        root = SafeRoot()
        try:
            token = write_private(root.path / "report.token", "unused\n")
            _, fake_env = fake_node(root.path / "fake")
            # no service: a clean job never reports (an unreachable one shows as a spooled report, checked below)
            nodes = {t: BenchNode(root, install, fake_env, "http://127.0.0.1:9", token, name=f"telemetry-{t}",
                                  telemetry=t) for t in ("on", "off")}
            results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
            for i in range(n):
                for telemetry, node in nodes.items():
                    job = str(1000 + i)
                    start, _ = job_window()
                    for hook in ("prolog", "epilog"):
                        results.setdefault((hook, telemetry), []).append(
                            meter.run(node.hook(hook), env=node.env(job, "0", start, hook)))
            for node in nodes.values():
                assert not list(node.state.glob("job-*")), "the clean epilog left state behind"
                assert not node.log.exists() and not node.spool.exists(), "the clean epilog started the collector"
        finally:
            root.close()
    print(f"faked node: 8 GPUs, 8 HCAs (1 port each), 48 PCI devices; {n} runs each, medians; CPU counted with "
          f"{meter.describe()}")
    for (hook, telemetry), rs in sorted(results.items()):
        print(f"  {hook:6s} telemetry={telemetry:3s}: wall {statistics.median(r[0] for r in rs) * 1000:6.1f} ms, "
              f"cpu {statistics.median(r[1] for r in rs) * 1000:6.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
