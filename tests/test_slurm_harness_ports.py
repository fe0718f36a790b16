"""The Slurm test harness after a killed run (tests/harness/slurm.py): a daemon of a test cluster left listening on
its port is ended by the next run, which holds the port's lock; anything else on the port is reported. No Slurm
needed: the listeners are Python processes named as the daemons are (their /proc comm)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from .harness.slurm import SlurmCluster, SlurmHarnessError, _alive, _stale_daemons

LISTENER = r"""
import socket, sys
open("/proc/self/comm", "w").write(sys.argv[1])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
while True:
    s.accept()[0].close()
"""


def _listener(name: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, "-c", LISTENER, name], stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_daemon_left_by_a_killed_run_is_ended_by_the_next_one(tmp_path):
    stale, port = _listener("slurmdbd")
    other, other_port = _listener("python3")
    try:
        assert _stale_daemons([port, other_port]) == [stale.pid]
        cluster = SlurmCluster(tmp_path / "c", slurmctld_port=port, node_ports=(_free_port(),))
        cluster._lock_ports()
        try:
            cluster._check_ports_free()  # ends the left-over slurmdbd, finds the ports free
        finally:
            cluster._unlock_ports()
        deadline = time.monotonic() + 30
        while stale.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stale.poll() is not None and not _alive(stale.pid)
        # a program that is not one of the cluster's daemons is left alone and named
        busy = SlurmCluster(tmp_path / "d", slurmctld_port=other_port, node_ports=(_free_port(),))
        busy._lock_ports()
        try:
            with pytest.raises(SlurmHarnessError, match=rf"ports \[{other_port}\] already in use"):
                busy._check_ports_free()
        finally:
            busy._unlock_ports()
        assert other.poll() is None
    finally:
        for p in (stale, other):
            p.kill()
            p.wait()
