"""Running the Slurm hooks without Slurm, as slurmd runs them, against a service that may misbehave.

`Node` is one node's hook setup: a hook.env (in a folder only root can change, as hooks/lib.sh requires: never under
/tmp), the spool and state folders, a kernel log with a fault line written now, and the report token of the service
it reports to. It runs `attribution-node epilog` or hooks/epilog with the epilog's environment (hooks/README.md "Try
it on one node"). `Proxy` stands between a node and the service (or a database) and refuses, blackholes (accepts,
never answers) or forwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from attribution.node import spool

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "attribution"
NODE_BIN = Path(sys.executable).parent / "attribution-node"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
UTC = timezone.utc
BUDGET = 20  # seconds: the production budget, as tests/node/test_hooks_slurm.py gives the hooks (a loaded 2-core machine needs it)
#: Where hook.env files of the tests live: a folder only root (or this user) can change, every folder above it too
SAFE_ROOT = Path("/var/lib/attribution-tests") if os.geteuid() == 0 else \
    Path.home() / ".cache" / "attribution-tests"


def safe_root() -> Path:
    """SAFE_ROOT, made when missing (0755)."""
    SAFE_ROOT.mkdir(parents=True, exist_ok=True, mode=0o755)
    SAFE_ROOT.chmod(0o755)
    return SAFE_ROOT


def safe_dir() -> Path:
    """A new folder that hooks/lib.sh and node/hookenv.py accept a hook.env in (0755, owned by this user, under
    folders no one else can change); removed by `drop_safe_dir`."""
    d = safe_root() / uuid.uuid4().hex[:12]
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    return d


def drop_safe_dir(d: Path) -> None:
    if d.parent == SAFE_ROOT:
        shutil.rmtree(d, ignore_errors=True)


def write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


class Proxy:
    """A TCP endpoint in front of a server that refuses, blackholes (accepts and never answers) or forwards."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.mode = "refuse"
        self.stall_marker: bytes | None = None  # in "forward": a client message holding it is never forwarded
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._stop = threading.Event()

    def set(self, mode: str) -> None:
        self.mode = mode
        if mode == "refuse":
            self._close_listener()
        elif self._listener is None:
            ls = socket.socket()
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", self.port))
            ls.listen(128)
            self._listener = ls
            threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def _accept(self, ls: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            if self.mode == "blackhole":
                self._held.append(conn)  # never read, never answered, never closed
                continue
            try:
                up = socket.create_connection(self.target)
            except OSError:
                conn.close()
                continue
            threading.Thread(target=self._pipe, args=(conn, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, conn, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client and self.stall_marker and self.stall_marker in data:
                    self._held += [src, dst]  # stops forwarding mid-transaction; the TCP connections stay up
                    self._stop.wait()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def close(self) -> None:
        self._stop.set()
        self._close_listener()
        for c in self._held:
            c.close()


def url_via(url: str, port: int) -> str:
    """`url` (a database URL or the service's http:// URL) with its host and port replaced by 127.0.0.1:`port`."""
    if url.startswith("http"):
        from urllib.parse import urlsplit, urlunsplit

        u = urlsplit(url)
        return urlunsplit((u.scheme, f"127.0.0.1:{port}", u.path, u.query, u.fragment))
    from sqlalchemy.engine import make_url

    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


HOOK_ENV = """ATTRIBUTION_BIN={bin}
ATTRIBUTION_BUDGET={budget}
ATTRIBUTION_KERNEL_SOURCE=file
ATTRIBUTION_KERNEL_FILE={base}/kern.log
ATTRIBUTION_FM_LOG={base}/no-fm.log
ATTRIBUTION_STATE_DIR={base}/state
ATTRIBUTION_SPOOL_DIR={base}/spool
ATTRIBUTION_LOG={base}/hooks.log
ATTRIBUTION_SERVICE_URL={url}
ATTRIBUTION_SERVICE_TOKEN_FILE={token_file}
ATTRIBUTION_SERVICE_TIMEOUT=2
"""


class Node:
    """One node's hook environment: hook.env, spool, state, a kernel log with a fault line written now, and the
    service it reports to (`url`, `token`). `close()` removes its hook.env folder."""

    def __init__(self, base: Path, url: str, token: str, job_id: str, name: str = "n1",
                 cluster: str = "hard") -> None:
        self.base, self.job_id, self.name, self.cluster = base, job_id, name, cluster
        base.mkdir(parents=True, exist_ok=True)
        self.etc = safe_dir()
        self.hook_env = self.etc / "hook.env"
        self.token_file = write_private(base / "report.token", token + "\n")
        self.url = url
        self.kernel = base / "kern.log"
        now = datetime.now(UTC)
        self.kernel.write_text(f"[{now.strftime('%a %b %e %H:%M:%S %Y')}] {XID79}\n")
        self.spool_dir = base / "spool"
        self.write_hook_env()

    def write_hook_env(self, budget: float = BUDGET, extra: str = "", url: str | None = None) -> None:
        if url is not None:
            self.url = url
        self.hook_env.write_text(HOOK_ENV.format(bin=NODE_BIN, budget=budget, base=self.base, url=self.url,
                                                 token_file=self.token_file) + extra)
        self.hook_env.chmod(0o644)

    def close(self) -> None:
        drop_safe_dir(self.etc)

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": self.job_id, "SLURMD_NODENAME": self.name,
                "SLURM_NODELIST": self.name, "SLURM_JOB_EXIT_CODE": "256", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
                "SLURM_CLUSTER_NAME": self.cluster, "ATTRIBUTION_HOOK_ENV": str(self.hook_env)}

    def epilog(self, budget: float = BUDGET) -> tuple[float, subprocess.CompletedProcess]:
        """`attribution-node epilog` as hooks/lib.sh runs it (--started: the budget counts from here); wall time."""
        t0 = time.monotonic()
        r = subprocess.run([str(NODE_BIN), "epilog", "--budget", str(budget), "--started", f"{time.time():.3f}",
                            "--kernel-file", str(self.kernel), "--fabricmanager-log", str(self.base / "no-fm.log"),
                            "--filter", str(ROOT / "hooks" / "suspicious.patterns")],
                           env=self.env(), capture_output=True, text=True, timeout=budget * 4)
        return time.monotonic() - t0, r

    def spooled(self) -> list[Path]:
        return spool.pending(self.spool_dir)

    def flush(self) -> subprocess.CompletedProcess:
        return subprocess.run([str(NODE_BIN), "spool", "flush", "--timeout", "60"], env=self.env(),
                              capture_output=True, text=True, timeout=120)


def run_hook(node: Node, budget: int, env: dict[str, str] | None = None,
             extra: str = "") -> tuple[float, subprocess.CompletedProcess]:
    """hooks/epilog exactly as slurmd runs it: no PATH, the epilog environment (or `env`), settings from hook.env
    (plus the lines `extra`)."""
    node.write_hook_env(budget, extra)
    env = dict(env) if env is not None else {k: v for k, v in node.env().items() if k.startswith("SLURM")}
    env["ATTRIBUTION_HOOK_ENV"] = str(node.hook_env)
    t0 = time.monotonic()
    r = subprocess.run([str(ROOT / "hooks" / "epilog")], env=env, capture_output=True, text=True,
                       timeout=budget + 30)
    return time.monotonic() - t0, r


class Controller:
    """The controller's hook environment: its configuration (the database, or the service), its home (spool),
    the output of a failed job (a CUDA ECC error on rank 0: gpu_hardware on n1) and `scontrol show job -o` of it;
    runs `attribution epilog` (the full command) as hooks/epilog-slurmctld does."""

    def __init__(self, base: Path, url: str, job_id: str, extra_config: str = "") -> None:
        self.base, self.job_id = base, job_id
        base.mkdir(parents=True, exist_ok=True)
        self.home = base / "home"
        self.config = base / "config.yaml"
        self.set_url(url, extra_config)
        now = datetime.now(UTC).replace(microsecond=0)
        self.output = base / f"slurm-{job_id}.out"
        self.output.write_text("[rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
        self.scontrol = base / "scontrol.txt"
        self.scontrol.write_text(
            f"JobId={job_id} JobName=train UserId=alice(1000) JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 "
            f"NodeList=n1 NumTasks=8 StartTime={(now - timedelta(hours=1)).strftime('%Y-%m-%dT%H:%M:%S')} "
            f"EndTime={now.strftime('%Y-%m-%dT%H:%M:%S')} StdOut={self.output} StdErr={self.output}\n")

    def set_url(self, url: str, extra_config: str = "") -> None:
        if url.startswith("http"):
            self.config.write_text(f"home: {self.home}\nservice_url: {url}\nservice_token_file: {self.base}/token\n"
                                   f"{extra_config}")
        else:
            self.config.write_text(f"home: {self.home}\ndatabase:\n  url: {url}\n  connect_timeout: 2\n{extra_config}")

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": self.job_id, "SLURM_JOB_EXIT_CODE": "256",
                "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_CLUSTER_NAME": "hard", "SLURM_JOB_NODELIST": "n1",
                "SLURM_JOB_USER": "alice", "ATTRIBUTION_CONFIG": str(self.config)}

    def epilog(self, budget: float = BUDGET) -> tuple[float, subprocess.CompletedProcess]:
        t0 = time.monotonic()
        r = subprocess.run([str(BIN), "epilog", "--budget", str(budget), "--started", f"{time.time():.3f}",
                            "--scontrol-output", str(self.scontrol)], env=self.env(), capture_output=True,
                           text=True, timeout=budget * 4)
        return time.monotonic() - t0, r

    def spooled(self) -> list[Path]:
        return spool.pending(self.home / "spool")

    def flush(self) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN), "spool", "flush", "--timeout", "60"], env=self.env(), capture_output=True,
                              text=True, timeout=120)
