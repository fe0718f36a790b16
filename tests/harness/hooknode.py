"""Running the Slurm hooks without Slurm, as slurmd runs them, against a database that may misbehave.

`Node` is one node's hook setup (config, home with its spool, a kernel log with a fault line written now) and runs
`attribution epilog` or hooks/epilog with the epilog's environment (hooks/README.md "Try it on one node").
`Proxy` stands between the hooks and PostgreSQL and refuses, blackholes (accepts, never answers) or forwards.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import make_url

from attribution.node import spool

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "attribution"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
UTC = timezone.utc
BUDGET = 20  # seconds: the production budget, as tests/node/test_hooks_slurm.py gives the hooks (a loaded 2-core machine needs it)


class Proxy:
    """A TCP endpoint in front of PostgreSQL that refuses, blackholes (accepts and never answers) or forwards."""

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


def url_via(pg_url: str, port: int) -> str:
    return make_url(pg_url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


_OPTIONS: dict[str, bool] = {}


class Node:
    """One node's hook environment: config, home (spool), kernel log with a fault line written now."""

    def __init__(self, base: Path, url: str, job_id: str, extra_config: str = "") -> None:
        self.base, self.job_id = base, job_id
        base.mkdir(parents=True, exist_ok=True)
        self.config = base / "config.yaml"
        self.set_url(url, extra_config)
        self.kernel = base / "kern.log"
        now = datetime.now(UTC)
        self.kernel.write_text(f"[{now.strftime('%a %b %e %H:%M:%S %Y')}] {XID79}\n")
        self.home = base / "home"

    def set_url(self, url: str, extra_config: str = "") -> None:
        self.config.write_text(f"database:\n  url: {url}\n  connect_timeout: 2\n{extra_config}")

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": self.job_id, "SLURMD_NODENAME": "n1",
                "SLURM_NODELIST": "n1", "SLURM_JOB_EXIT_CODE": "256", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
                "SLURM_CLUSTER_NAME": "hard", "ATTRIBUTION_CONFIG": str(self.config),
                "ATTRIBUTION_HOME": str(self.home)}

    def epilog(self, budget: float = BUDGET) -> tuple[float, subprocess.CompletedProcess]:
        """`attribution epilog` as hooks/lib.sh runs it (--started: the budget counts from here); wall time."""
        t0 = time.monotonic()
        started = ["--started", f"{time.time():.3f}"]
        r = subprocess.run([str(BIN), "epilog", "--budget", str(budget), *started, "--kernel-file", str(self.kernel),
                            "--fabricmanager-log", str(self.base / "no-fm.log")], env=self.env(),
                           capture_output=True, text=True, timeout=budget * 4)
        return time.monotonic() - t0, r

    def spooled(self) -> list[Path]:
        return spool.pending(self.home / "spool")

    def flush(self) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN), "spool", "flush", "--timeout", "60"], env=self.env(), capture_output=True,
                              text=True, timeout=120)


HOOK_ENV = """ATTRIBUTION_BIN={bin}
ATTRIBUTION_BUDGET={budget}
ATTRIBUTION_KERNEL_SOURCE=file
ATTRIBUTION_KERNEL_FILE={base}/kern.log
ATTRIBUTION_FM_LOG={base}/no-fm.log
ATTRIBUTION_STATE_DIR={base}/state
ATTRIBUTION_LOG={base}/hooks.log
ATTRIBUTION_CONFIG={base}/config.yaml
ATTRIBUTION_HOME={base}/home
"""


def run_hook(node: Node, budget: int, env: dict[str, str] | None = None,
             extra: str = "") -> tuple[float, subprocess.CompletedProcess]:
    """hooks/epilog exactly as slurmd runs it: no PATH, the epilog environment (or `env`), settings from hook.env
    (plus the lines `extra`)."""
    (node.base / "hook.env").write_text(HOOK_ENV.format(bin=BIN, budget=budget, base=node.base) + extra)
    env = dict(env) if env is not None else {k: v for k, v in node.env().items() if k.startswith("SLURM")}
    env["ATTRIBUTION_HOOK_ENV"] = str(node.base / "hook.env")
    t0 = time.monotonic()
    r = subprocess.run([str(ROOT / "hooks" / "epilog")], env=env, capture_output=True, text=True,
                       timeout=budget + 30)
    return time.monotonic() - t0, r
