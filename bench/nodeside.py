"""A compute node as the benchmarks meet it: the installed node artifact, and faked nodes running its hooks.

- `install_node(work)`: this checkout built with `pip wheel --no-deps` (from a clean copy of its sources: an
  in-tree build/ could carry modules removed since) and its base install (no extras: the node collector, the
  standard library only) in a fresh venv; the hooks are the ones the wheel installs (attribution/_data/hooks).
- `SafeRoot`: a folder only root (or this user) can change, every folder above it too, as hooks/lib.sh requires
  of the folder holding hook.env (never /tmp): /var/lib/attribution-bench/<run> as root.
- `BenchNode`: one node's files under it: hook.env (read as data by the hooks), the state and spool folders, the
  hook log, the kernel log, and the counters of a faked 8-GPU/8-HCA node (tests/harness/fakenode.py: sysfs and an
  `nvidia-smi` printing a real-format document). `env()` is the epilog's environment as slurmd gives it (no PATH;
  ATTRIBUTION_HOOK_ENV only because the default /etc/attribution/hook.env is not ours to write).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from bench.report import ROOT

UTC = timezone.utc
#: What the wheel's build reads (MANIFEST.in and setup.py's DATA): copied to a clean folder before building
SOURCES = ("attribution", "rules", "migrations", "sql", "hooks", "tests/incidents", "pyproject.toml", "setup.py",
           "MANIFEST.in", "README.md")


class NodeInstall:
    """The base install of this checkout's wheel in a venv of its own: `agent` (bin/attribution-node) and `hooks`
    (the installed hooks folder)."""

    def __init__(self, venv: Path, wheel: Path) -> None:
        self.venv, self.wheel = venv, wheel
        self.agent = venv / "bin" / "attribution-node"
        site = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True, cwd="/").stdout.strip()
        self.hooks = Path(site) / "attribution" / "_data" / "hooks"

    def third_party(self) -> list[str]:
        """The distributions installed in the venv besides attribution and pip's own (none, for the base install)."""
        out = subprocess.run([str(self.venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                             check=True, capture_output=True, text=True, cwd="/").stdout.split()
        return [d for d in out if not d.lower().startswith(("attribution==", "pip==", "setuptools=="))]


def install_node(work: Path) -> NodeInstall:
    """Built and installed once per benchmark run, in `work`."""
    venv = work / "node-venv"
    dist = work / "node-dist"
    if not (venv / "bin" / "attribution-node").exists():
        src = work / "node-src"
        shutil.rmtree(src, ignore_errors=True)
        for name in SOURCES:
            s = ROOT / name
            if s.is_dir():
                shutil.copytree(s, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(s, src / name)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
                       check=True, capture_output=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        str(next(dist.glob("attribution-*.whl")))], check=True, capture_output=True)
        shutil.rmtree(src, ignore_errors=True)
    inst = NodeInstall(venv, next(dist.glob("attribution-*.whl")))
    if not (inst.hooks / "epilog").exists():
        raise RuntimeError(f"the wheel installed no hooks at {inst.hooks}")
    return inst


class SafeRoot:
    """Where a run's nodes live: `path`, a new folder under /var/lib/attribution-bench (their state, spool, logs,
    the faked counters), and `etc`, /etc/attribution-bench, for their hook.env files (`hook_env(name)`): a folder
    only root can change with every folder above it, as hooks/lib.sh requires, and as deep as production's
    /etc/attribution/hook.env (lib.sh checks each folder up to / with a `stat`: the same number here). Not root:
    both under ~/.cache/attribution-bench. `close()` removes the run's folder and its hook.env files."""

    def __init__(self) -> None:
        root = os.geteuid() == 0
        top = Path("/var/lib/attribution-bench") if root else Path.home() / ".cache" / "attribution-bench"
        self.etc = Path("/etc/attribution-bench") if root else top / "etc"
        self.run = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for d in (top, self.etc):
            d.mkdir(parents=True, exist_ok=True, mode=0o755)
            d.chmod(0o755)
        self.path = top / self.run
        self.path.mkdir(mode=0o755)

    def hook_env(self, name: str) -> Path:
        return self.etc / f"{self.run}-{name}.env"

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        for f in self.etc.glob(f"{self.run}-*.env"):
            f.unlink()


def write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def write_job_kernel_log(path: Path, start: float, end: float, lines: int = 2_000, xid79_at: int | None = 1_000,
                         seed: int = 3, append: bool = False) -> None:
    """This node's kernel log of one job: `lines` lines of kernel noise stamped across the job's window, with an
    Xid 79 at line `xid79_at` (None: none); written to `path`, or added to its end."""
    from bench.gen import write_kernel_log

    write_kernel_log(path, lines, 0, seed=seed, xid79_at=xid79_at, start=datetime.fromtimestamp(start, UTC),
                     end=datetime.fromtimestamp(end, UTC), append=append)


class BenchNode:
    """One node's hook setup in a SafeRoot (its files in a folder `name` of it, its hook.env in its `etc`),
    reporting to `url` with the token in `token_file`; `fake_hook_env` points the hooks at a faked node's counters
    (one may serve many nodes: they only read it)."""

    def __init__(self, where: SafeRoot, install: NodeInstall, fake_hook_env: str, url: str, token_file: Path,
                 name: str = "g001", cluster: str = "bench", telemetry: str = "on", budget: int = 20,
                 timeout: int = 10) -> None:
        base = where.path / name
        self.base, self.install, self.name, self.cluster = base, install, name, cluster
        base.mkdir(mode=0o755)
        self.kernel = base / "kern.log"
        self.kernel.write_text("")
        self.state, self.spool, self.log = base / "state", base / "spool", base / "hooks.log"
        self.hook_env = where.hook_env(name)
        self.token_file, self.fake_hook_env, self.telemetry = token_file, fake_hook_env, telemetry
        self.budget, self.timeout = budget, timeout  # the production defaults (hooks/lib.sh, node/hookenv.py)
        self.set_url(url)

    def set_url(self, url: str) -> None:
        """(Re)writes hook.env, reporting to `url`."""
        install, base, self.url = self.install, self.base, url
        self.hook_env.write_text(
            f"ATTRIBUTION_BIN={install.agent}\nATTRIBUTION_BUDGET={self.budget}\nATTRIBUTION_KERNEL_SOURCE=file\n"
            f"ATTRIBUTION_KERNEL_FILE={self.kernel}\nATTRIBUTION_FM_LOG={base}/no-fabricmanager.log\n"
            f"ATTRIBUTION_STATE_DIR={self.state}\nATTRIBUTION_SPOOL_DIR={self.spool}\nATTRIBUTION_LOG={self.log}\n"
            f"ATTRIBUTION_TELEMETRY={self.telemetry}\n"
            f"ATTRIBUTION_SERVICE_URL={url}\nATTRIBUTION_SERVICE_TOKEN_FILE={self.token_file}\n"
            f"ATTRIBUTION_SERVICE_TIMEOUT={self.timeout}\n" + self.fake_hook_env)
        self.hook_env.chmod(0o644)

    def env(self, job: str, exit_code: str, start: float | None = None, hook: str = "epilog",
            nodelist: str | None = None) -> dict[str, str]:
        """The environment slurmd gives the hook (no PATH), and where hook.env is."""
        env = {"SLURM_JOB_ID": job, "SLURMD_NODENAME": self.name, "SLURM_NODELIST": nodelist or self.name,
               "SLURM_JOB_NODELIST": nodelist or self.name, "SLURM_CLUSTER_NAME": self.cluster,
               "SLURM_SCRIPT_CONTEXT": f"{hook}_slurmd", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000",
               "SLURM_JOB_PARTITION": "gpu", "ATTRIBUTION_HOOK_ENV": str(self.hook_env)}
        if hook == "epilog":
            env["SLURM_JOB_EXIT_CODE"] = exit_code
            env["SLURM_JOB_EXIT_CODE2"] = "0:0" if exit_code == "0" else f"{int(exit_code) >> 8}:0"
        if start is not None:
            env["SLURM_JOB_START_TIME"] = str(int(start))
        return env

    def hook(self, name: str) -> list[str]:
        return [str(self.install.hooks / name)]

    def prolog(self, job: str, start: float | None = None, nodelist: str | None = None,
               keep_log: bool = False) -> None:
        """hooks/prolog of `job` (its start stamp with the logs' offsets, its counter snapshot), with this node's
        kernel log emptied first unless `keep_log`: what the epilog then reads of it is what is written after."""
        if not keep_log:
            self.kernel.write_text("")
        r = subprocess.run(self.hook("prolog"), env=self.env(job, "0", start, "prolog", nodelist),
                           capture_output=True, timeout=120)
        if r.returncode != 0 or not (self.state / f"job-{job}.start").exists():
            raise RuntimeError(f"hooks/prolog of job {job} on {self.name} left no stamp: {r}")

    def last_line(self) -> str:
        lines = self.log.read_text().strip().splitlines() if self.log.exists() else []
        return lines[-1] if lines else ""

    def spooled(self) -> int:
        return len(list(self.spool.glob("*.spool"))) if self.spool.is_dir() else 0


def fake_node(where: Path):
    """A faked 8-GPU/8-HCA node (tests/harness/fakenode.py) and the hook.env lines pointing the hooks at it."""
    sys.path.insert(0, str(ROOT))
    from tests.harness.fakenode import FakeNode

    node = FakeNode(where)
    return node, node.hook_env()


def tree_pids(pid: int) -> list[int]:
    """`pid` and its live descendants (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(raw[raw.rindex(")") + 2:].split()[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in parents:
            out.append(p)
            todo.extend(c for c, pp in parents.items() if pp == p)
    return out


def rss_of(pids) -> tuple[int, int]:
    """(the resident memory now, the sum of each process's peak resident memory) of `pids`, in bytes."""
    rss = hwm = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, hwm


def job_window(now: float | None = None) -> tuple[float, float]:
    """A job that ran the last ten minutes."""
    now = time.time() if now is None else now
    return now - 600, now


__all__ = ["NodeInstall", "install_node", "SafeRoot", "BenchNode", "fake_node", "write_private",
           "write_job_kernel_log", "tree_pids", "rss_of", "job_window"]
