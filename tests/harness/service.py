"""The Attribution Service as the tests (and bench/service_throughput.py) meet it: `attribution serve` in a
subprocess on a free port, against a given database, with a fresh tokens file.

Typical use::

    svc = start_service(db_url, tmp_dir)
    try:
        httpx.get(svc.url + "/v1/recurring-faults", headers=svc.auth("read"))
    finally:
        svc.stop()

The server runs from this interpreter (`python -m attribution.cli serve`), so it sees the same installed
packages. Its output goes to `<tmp_dir>/service.log`; a server that does not answer /healthz in time is killed
and the error quotes the log's tail.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .pg import free_port

__all__ = ["RunningService", "service_on_new_database", "start_service", "write_tokens"]


@dataclass
class RunningService:
    url: str
    tokens: dict[str, str]  # "report", "read", "both" -> token
    config: Path
    log: Path
    process: subprocess.Popen = field(repr=False)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _limit_open_files(n: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def write_tokens(path: Path) -> dict[str, str]:
    """A tokens file (mode 0600) with one token per scope and one with both; returns them."""
    tokens = {who: secrets.token_hex(24) for who in ("report", "read", "both")}
    text = (f"# scopes     token    name\nreport {tokens['report']} hooks\nread {tokens['read']} readers\n"
            f"read,report {tokens['both']} admin\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return tokens


def start_service(db_url: str, tmp_dir: Path, service: dict[str, Any] | None = None, workers: int = 1,
                  timeout: float = 60, database: dict[str, Any] | None = None,
                  serve_args: tuple[str, ...] = (), extra_tokens: str = "",
                  open_files: int | None = None, settings: dict[str, Any] | None = None,
                  env: dict[str, str] | None = None) -> RunningService:
    """Start `attribution serve` on 127.0.0.1:<free port> against `db_url` (already migrated). `extra_tokens`:
    lines added to the tokens file; `open_files`: the server's RLIMIT_NOFILE (soft and hard); `settings`: more
    sections of its configuration file (e.g. job_actions); `env`: more environment variables."""
    import httpx

    tmp_dir.mkdir(parents=True, exist_ok=True)
    tokens_file = tmp_dir / "tokens"
    tokens = write_tokens(tokens_file)
    if extra_tokens:
        with open(tokens_file, "a") as f:
            f.write(extra_tokens)
    port = free_port()
    config = tmp_dir / "config.yaml"
    settings = {
        **(settings or {}),
        "home": str(tmp_dir / "home"),
        "database": {"url": db_url, **(database or {})},
        "service": {"listen": f"127.0.0.1:{port}", "tokens_file": str(tokens_file), "workers": workers,
                    **(service or {})},
    }
    config.write_text(yaml.safe_dump(settings))
    log = tmp_dir / "service.log"
    env = {**{k: v for k, v in os.environ.items() if k not in ("ATTRIBUTION_CONFIG", "ATTRIBUTION_DATABASE_URL")},
           **(env or {})}
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "attribution.cli", "--config", str(config), "serve",
                                 "--no-access-log", *serve_args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True,
                                preexec_fn=(lambda: _limit_open_files(open_files)) if open_files else None)
    svc = RunningService(f"http://127.0.0.1:{port}", tokens, config, log, proc)
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"attribution serve exited with {proc.returncode}:\n{svc.log_tail()}")
        try:
            if httpx.get(svc.url + "/healthz", timeout=2).status_code == 200:
                return svc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    svc.stop()
    raise RuntimeError(f"attribution serve did not answer /healthz within {timeout} s:\n{svc.log_tail()}")


@contextlib.contextmanager
def service_on_new_database(pg_server, pg_template: str, tmp_dir: Path, prefix: str):
    """A service over a database of its own (migrated, empty: copied from the session's template), dropped after;
    yields (the service, the database's URL)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    url = pg_server.create_database(name, template=pg_template)
    svc = start_service(url, tmp_dir)
    try:
        yield svc, url
    finally:
        svc.stop()
        pg_server.drop_database(name)
