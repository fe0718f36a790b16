"""`attribution serve` refuses an address it cannot listen on before it starts anything (#32: on a port in use it
printed uvicorn's lines, exited 3, the code of an unreachable database, after starting and stopping the embedded
database)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
import yaml

from tests.harness.service import write_tokens


def _serve(tmp_path, listen: str) -> subprocess.CompletedProcess:
    tokens = tmp_path / "tokens"
    write_tokens(tokens)
    config = tmp_path / "config.yaml"
    # no database url: serve would start the embedded database (tmp_path/home/pg) before it listens
    config.write_text(yaml.safe_dump({"home": str(tmp_path / "home"),
                                      "service": {"listen": listen, "tokens_file": str(tokens)}}))
    env = {k: v for k, v in os.environ.items() if k not in ("ATTRIBUTION_CONFIG", "ATTRIBUTION_DATABASE_URL")}
    return subprocess.run([sys.executable, "-m", "attribution.cli", "--config", str(config), "serve"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_port_in_use_is_one_line_naming_the_address_and_exit_2_before_the_database_starts(tmp_path):
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: this must still clash
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _serve(tmp_path, f"127.0.0.1:{port}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"attribution: cannot listen on 127.0.0.1:{port}: the address is in use "
                                     f"(another attribution serve or another program listens there)"]
    assert r.stdout == ""
    assert not (tmp_path / "home" / "pg").exists()  # nothing was started, so nothing lingers to be stopped


def test_an_address_of_no_interface_here_is_exit_2_naming_it(tmp_path):
    r = _serve(tmp_path, "192.0.2.1:8080")  # TEST-NET-1 (RFC 5737): never a local address
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == ["attribution: cannot listen on 192.0.2.1:8080: no interface of this machine "
                                     "has that address"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_service_stopped_with_sigterm_leaves_no_metrics_folder(node_db, tmp_path, workers):
    """systemctl stop sends SIGTERM. One worker: uvicorn shuts down, then raises the signal again, and with the
    default action the process died there, before its cleanup: every stop left an attribution-metrics-* folder of
    the workers' counter files in the temporary directory (104 of them here after a day of tests). Now the cleanup
    runs first and the process still ends by SIGTERM (what systemd counts as a clean stop); with two workers
    uvicorn's supervisor returns and the exit is 0, as before."""
    from tests.harness.service import start_service

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    svc = start_service(node_db, tmp_path / "svc", workers=workers, env={"TMPDIR": str(tmp)})
    made = [p.name for p in tmp.iterdir()]
    assert len(made) == 1 and made[0].startswith("attribution-metrics-")
    svc.process.send_signal(signal.SIGTERM)
    assert svc.process.wait(60) == {1: -signal.SIGTERM, 2: 0}[workers], svc.log_tail()
    assert list(tmp.iterdir()) == []
