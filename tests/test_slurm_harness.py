"""Tests for tests/harness/slurm.py against a real two-node Slurm cluster, on 22.05 (the host's) and 24.11 (the
Debian 13 root): every test runs once per version (the ``slurm`` fixture, tests/conftest.py).

Needs root and the Debian Slurm packages (installed on demand by the fixture).
Deselect with ``-m "not slurm"``; ``-m slurm24`` selects the 24.11 runs.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from .harness.slurm import SlurmCluster

pytestmark = pytest.mark.slurm
DATA = Path(__file__).resolve().parent / "data" / "slurm24"

# Hooks run with no PATH: every command below is an absolute path.
NODE_EPILOG = r"""#!/bin/bash
out=@OUT@
n="${SLURMD_NODENAME:-unknown}"
/usr/bin/date +%s.%N > "$out/epilog-${SLURM_JOB_ID}-${n}.time"
/usr/bin/env | /usr/bin/sort > "$out/.epilog-${SLURM_JOB_ID}-${n}.env"
/usr/bin/mv "$out/.epilog-${SLURM_JOB_ID}-${n}.env" "$out/epilog-${SLURM_JOB_ID}-${n}.env"
mode=ok
[ -f "$out/epilog_mode" ] && read -r mode < "$out/epilog_mode"
[ "$mode" = fail ] && exit 7
exit 0
"""

CTLD_EPILOG = r"""#!/bin/bash
out=@OUT@
echo "$SLURM_JOB_ID" >> "$out/epilogctld-${SLURM_JOB_ID}.count"
/usr/bin/env | /usr/bin/sort > "$out/.epilogctld-${SLURM_JOB_ID}.env"
/usr/bin/mv "$out/.epilogctld-${SLURM_JOB_ID}.env" "$out/epilogctld-${SLURM_JOB_ID}.env"
exit 0
"""

PROLOG = r"""#!/bin/bash
/usr/bin/env | /usr/bin/sort > "@OUT@/prolog-${SLURM_JOB_ID}-${SLURMD_NODENAME:-unknown}.env"
exit 0
"""

# The accounting cluster uses its own ports so that it never collides with the
# module-scoped plain cluster (both may be alive at the same time).
ACCT_PORTS = dict(slurmctld_port=16827, slurmdbd_port=16828, node_ports=(17011, 17012), mysql_port=13316)


def _write_hooks(base: Path) -> tuple[Path, dict[str, str]]:
    out = base / "out"
    out.mkdir(parents=True, exist_ok=True)
    hooks = {}
    for name, body in (("epilog.sh", NODE_EPILOG), ("epilog_ctld.sh", CTLD_EPILOG), ("prolog.sh", PROLOG)):
        p = base / name
        p.write_text(body.replace("@OUT@", str(out)))
        p.chmod(0o755)
        hooks[name] = str(p)
    return out, hooks


def _require_packages(cluster: SlurmCluster) -> None:
    if cluster.root is None and cluster.missing_binaries() and not shutil.which("apt-get"):
        pytest.skip(f"Slurm binaries missing and no apt-get: {cluster.missing_binaries()}")


def _start(cluster: SlurmCluster, timings: dict) -> SlurmCluster:
    timings["install_s"] = round(cluster.install(), 2)
    timings["start_s"] = round(cluster.start(), 2)
    return cluster


def _read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _wait_for(path: Path, timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout} s")


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory, slurm):
    base = tmp_path_factory.mktemp("slurm")
    out, hooks = _write_hooks(base)
    cluster = slurm.cluster(base / "cluster", epilog=hooks["epilog.sh"],
                            epilog_slurmctld=hooks["epilog_ctld.sh"], prolog=hooks["prolog.sh"],
                            prolog_epilog_timeout=30, extra_env={"ATTRIBUTION_TEST_MARKER": "1"})
    _require_packages(cluster)
    cluster.out_dir = out
    cluster.timings = {}
    try:
        _start(cluster, cluster.timings)
        yield cluster
    finally:
        cluster.stop()
        (base / "timings.json").write_text(json.dumps(cluster.timings, indent=1))
        print(f"\nslurm harness timings: {cluster.timings}")


@pytest.fixture(scope="module")
def failed_two_node_job(slurm_cluster):
    """One failing 2-node, 2-GPU-per-node job, run to completion."""
    c = slurm_cluster
    t0 = time.time()
    jid = c.sbatch(["-N2", "--gres=gpu:2", "-J", "twonode", "--wrap", "srun -l hostname; exit 3"])
    state = c.wait_job(jid, timeout=120)
    times = [float(_wait_for(c.out_dir / f"epilog-{jid}-{n}.time").read_text()) for n in c.nodes]
    c.timings["sbatch_to_node_epilogs_s"] = round(max(times) - t0, 2)
    c.timings["sbatch_to_wait_job_s"] = round(time.time() - t0, 2)
    return jid, state


class TestSlurmCluster:
    def test_nodes_idle_after_start(self, slurm_cluster):
        assert slurm_cluster.node_states() == {"node1": "idle", "node2": "idle"}
        assert slurm_cluster.env()["SLURM_CONF"] == str(slurm_cluster.conf_path)
        r = slurm_cluster.run(["scontrol", "show", "config"])
        assert r.returncode == 0
        assert "attrtest" in r.stdout

    def test_two_node_job_fails(self, failed_two_node_job, slurm_cluster):
        jid, state = failed_two_node_job
        assert state == "FAILED"
        info = slurm_cluster.job_info(jid)  # MinJobAge keeps it visible
        assert info is not None and info["ExitCode"] == "3:0" and info["NodeList"] == "node[1-2]"
        rec = slurm_cluster.jobcomp_record(jid)
        assert rec is not None and rec["JobState"] == "FAILED" and rec["ExitCode"] == "3:0"

    def test_node_epilog_on_both_nodes(self, failed_two_node_job, slurm_cluster):
        jid, _ = failed_two_node_job
        for node in ("node1", "node2"):
            env = _read_env(_wait_for(slurm_cluster.out_dir / f"epilog-{jid}-{node}.env"))
            assert env["SLURMD_NODENAME"] == node
            assert env["SLURM_JOB_EXIT_CODE2"] == "3:0"
            assert env["SLURM_JOB_GPUS"] == "0,1"
            assert env["SLURM_NODELIST"] == "node[1-2]"
            assert env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
            assert "PATH" not in env                       # hooks get no PATH ...
            assert "ATTRIBUTION_TEST_MARKER" not in env    # ... nor the daemons' environment

    def test_prolog_on_both_nodes(self, failed_two_node_job, slurm_cluster):
        jid, _ = failed_two_node_job
        for node in ("node1", "node2"):
            env = _read_env(_wait_for(slurm_cluster.out_dir / f"prolog-{jid}-{node}.env"))
            assert env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"

    def test_epilog_slurmctld_once(self, failed_two_node_job, slurm_cluster):
        jid, _ = failed_two_node_job
        env = _read_env(_wait_for(slurm_cluster.out_dir / f"epilogctld-{jid}.env"))
        assert env["SLURM_JOB_NODELIST"] == "node[1-2]"
        assert env["SLURM_JOB_EXIT_CODE2"] == "3:0"
        assert env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmctld"
        time.sleep(0.5)  # a second (wrong) run would show up here
        assert (slurm_cluster.out_dir / f"epilogctld-{jid}.count").read_text().split() == [jid]

    def test_wait_job_falls_back_to_jobcomp(self, failed_two_node_job, slurm_cluster, monkeypatch):
        jid, _ = failed_two_node_job
        monkeypatch.setattr(slurm_cluster, "job_info", lambda job_id: None)  # "scontrol forgot it"
        assert slurm_cluster.wait_job(jid, timeout=5) == "FAILED"

    def test_no_node_drained(self, failed_two_node_job, slurm_cluster):
        assert slurm_cluster.drained_nodes() == []
        assert set(slurm_cluster.node_states().values()) == {"idle"}

    def test_a_second_cluster_on_the_same_ports_waits_for_the_lock(self, slurm_cluster, tmp_path):
        c = slurm_cluster
        other = SlurmCluster(tmp_path / "other", slurmctld_port=c.slurmctld_port, node_ports=c.node_ports,
                             root=c.root, binds=c.runner.binds if c.runner else None, lock_timeout=1.5)
        t0 = time.monotonic()
        with pytest.raises(Exception, match="locked by another test cluster") as exc:
            other.start()
        assert time.monotonic() - t0 >= 1.5
        assert "already in use" not in str(exc.value)  # it never got as far as probing the ports
        assert not (tmp_path / "other" / "slurm.conf").exists()
        assert c.node_states() == {"node1": "idle", "node2": "idle"}

    def test_failing_epilog_drains_and_resume(self, slurm_cluster):
        c = slurm_cluster
        mode = c.out_dir / "epilog_mode"
        mode.write_text("fail\n")
        try:
            jid = c.sbatch(["-N1", "-w", "node2", "--wrap", "true"])
            assert c.wait_job(jid) == "COMPLETED"
            deadline = time.monotonic() + 15
            while c.drained_nodes() != ["node2"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert c.drained_nodes() == ["node2"]
        finally:
            mode.unlink()
        c.resume("node2")
        assert c.drained_nodes() == []


@pytest.fixture(scope="class")
def slurm_acct_cluster(tmp_path_factory, slurm):
    base = tmp_path_factory.mktemp("slurm-acct")
    out, hooks = _write_hooks(base)
    cluster = slurm.cluster(base / "cluster", epilog=hooks["epilog.sh"],
                            epilog_slurmctld=hooks["epilog_ctld.sh"], prolog=None,
                            with_accounting=True, **ACCT_PORTS)
    _require_packages(cluster)
    cluster.out_dir = out
    cluster.timings = {}
    try:
        _start(cluster, cluster.timings)
        yield cluster
    finally:
        cluster.stop()
        cluster.remove_database()
        (base / "timings.json").write_text(json.dumps(cluster.timings, indent=1))
        print(f"\nslurm harness (accounting) timings: {cluster.timings}")


class TestSlurmAccounting:
    def test_start_time(self, slurm_acct_cluster):
        assert slurm_acct_cluster.start_seconds < 30

    def test_sacct_sees_failed_job(self, slurm_acct_cluster):
        c = slurm_acct_cluster
        t0 = time.monotonic()
        jid = c.sbatch(["-N2", "--gres=gpu:2", "--wrap", "srun -l hostname; exit 3"])
        assert c.wait_job(jid) == "FAILED"
        # The record is written asynchronously (NodeList can briefly read "node1"): poll.
        line = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = c.run(["sacct", "-j", jid, "-X", "-P", "-n", "-o", "JobID,State,ExitCode,NodeList"])
            assert r.returncode == 0, r.stderr
            line = r.stdout.strip()
            if line == f"{jid}|FAILED|3:0|node[1-2]":
                break
            time.sleep(0.2)
        assert line == f"{jid}|FAILED|3:0|node[1-2]"
        c.timings["sbatch_to_sacct_s"] = round(time.monotonic() - t0, 2)
        assert c.drained_nodes() == []


def test_apt_takes_a_callers_environment_that_names_debian_frontend_again():
    """debroot passes DEBIAN_FRONTEND in its own environment: building apt's environment must not fail on it
    (it did: `dict() got multiple values for keyword argument`, on a machine without debootstrap)."""
    from tests.harness import apt

    env = apt.environment({"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8"})
    assert env["DEBIAN_FRONTEND"] == "noninteractive" and env["LC_ALL"] == "C.UTF-8"
    assert apt.environment()["DEBIAN_FRONTEND"] == "noninteractive"
