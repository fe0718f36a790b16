"""What every benchmark shares: its result row, the paths, the machine and its load, docs/performance.md."""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "attribution"


def node_bin(work: Path) -> Path:
    """`attribution` as a node runs it: this checkout built as a wheel and installed in a venv of its own, as
    docs/install.md installs it on nodes. This checkout's own venv is an editable install, whose import finder
    (pathlib, importlib.util, fnmatch and urllib.parse at every interpreter start, before the agent runs) a node
    never has. The wheel's dependencies are this venv's (a path line in the new venv, so the editable finder's
    own .pth is not processed). Built once per benchmark run, in `work`."""
    import subprocess
    import sysconfig

    venv = work / "node-venv"
    exe = venv / "bin" / "attribution"
    if exe.exists():
        return exe
    dist = work / "node-dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)], check=True,
                   capture_output=True)  # as tests/test_packaging.py builds it
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    wheel = next(dist.glob("attribution-*.whl"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, cwd="/").stdout.strip()
    Path(site, "attribution-bench-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return exe


@dataclass
class Result:
    name: str
    ours: str
    baseline: str
    ratio: str
    target: str
    met: bool | None
    notes: list[str] = field(default_factory=list)


def loadavg() -> str:
    """The 1-minute load average and how many processes are runnable: the neighbours' share of the machine."""
    try:
        parts = Path("/proc/loadavg").read_text().split()
        return f"load {parts[0]} ({parts[3]} runnable/total)"
    except (OSError, IndexError):
        return "load unknown"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {platform.platform()}, Python {platform.python_version()}"


def write_report(results: list[Result], quick: bool, path: Path, loads: list[str]) -> str:
    lines = ["# Performance", "",
             "Measured by `python -m bench.run` (one command, generates its own data and databases) "
             f"{'with --quick (small sizes)' if quick else 'at full size'} on {time.strftime('%Y-%m-%d')}.", "",
             f"Machine: {machine()}. Shared with other sessions' builds and tests while it ran ({'; '.join(loads)}"
             "): absolute times are noisy, the ratios to the baselines measured in the same run (CPU time where "
             "it says so) are the result.", "",
             "| benchmark | ours | baseline (same run) | ratio | target | met |", "|---|---|---|---|---|---|"]
    for r in results:
        met = {True: "yes", False: "**no**", None: "-"}[r.met]
        lines.append(f"| {r.name} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {met} |")
    lines.append("")
    for r in results:
        for note in r.notes:
            lines.append(f"- {r.name.split(':')[0]}: {note}")
    text = "\n".join(lines) + "\n"
    existing = path.read_text() if path.exists() else ""
    marker = "\n## How these numbers are made"
    tail = existing[existing.index(marker):] if marker in existing else ""
    path.write_text(text + tail)
    return text
