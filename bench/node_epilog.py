"""CPU of one node epilog of a failed job, as slurmd runs it: a fresh process each time.

    python -m bench.node_epilog --bin .venv/bin/attribution [--runs 7] [--db-url postgresql://...]

Each run is `attribution epilog` on a job that exited 1 with an Xid 79 in this node's kernel log, in a fresh
interpreter; its CPU (user + system, of the process and every child it waited for) comes from wait4's rusage.
One warm-up run per scenario first (it fills the node agent's caches, as the first failed job on a node does).
Scenarios: the service answering (stored), the service away (spooled), the database answering (stored, needs
--db-url of a migrated database), the database away (spooled).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Ok(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = json.dumps({"stored": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def run_once(bin_: str, base: Path, config: str, job: int) -> tuple[float, str]:
    cfg = base / "config.yaml"
    cfg.write_text(config)
    kern = base / "kern.log"
    kern.write_text(f"[{datetime.now(timezone.utc).strftime('%a %b %e %H:%M:%S %Y')}] {XID79}\n")
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(job), "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n1",
           "SLURM_JOB_EXIT_CODE": "256", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_CLUSTER_NAME": "bench",
           "ATTRIBUTION_CONFIG": str(cfg), "ATTRIBUTION_HOME": str(base / "home"), "HOME": str(base)}
    argv = [bin_, "epilog", "--budget", "6", "--started", f"{time.time():.3f}", "--kernel-file", str(kern),
            "--fabricmanager-log", str(base / "no-fm.log")]
    out = base / "out"
    with open(out, "w") as f:
        p = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, _, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime, out.read_text().strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--db-url", default=None)
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp) / "token"
        token.write_text("t" * 32)
        token.chmod(0o600)
        scenarios = {
            "service answering": f"service_url: http://127.0.0.1:{srv.server_port}\nservice_token_file: {token}\n",
            "service away": f"service_url: http://127.0.0.1:{_closed_port()}\nservice_token_file: {token}\n",
            "database away": f"database:\n  url: postgresql://u@127.0.0.1:{_closed_port()}/x\n  connect_timeout: 1\n",
        }
        if args.db_url:
            scenarios["database answering"] = f"database:\n  url: {args.db_url}\n"
        job = 1000
        for name, config in scenarios.items():
            base = Path(tmp) / name.replace(" ", "-")
            base.mkdir()
            job += 1
            run_once(args.bin, base, config, job)  # warm-up: fills the caches
            cpu = []
            line = ""
            for _ in range(args.runs):
                job += 1
                c, line = run_once(args.bin, base, config, job)
                cpu.append(c)
            print(f"{name:20s} min {min(cpu) * 1000:6.0f} ms  median {statistics.median(cpu) * 1000:6.0f} ms  "
                  f"({args.runs} runs)  last: {line.splitlines()[-1][:110] if line else ''}")
    srv.shutdown()


if __name__ == "__main__":
    main()
