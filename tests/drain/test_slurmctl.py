"""attribution/drain/slurmctl.py and `attribution drain sync-nodes` against a real slurmctld (once on Slurm 22.05,
once on 24.11: the ``slurm`` fixture), with the test PostgreSQL.

An operator drains and resumes a node with scontrol, never with attribution: sync-nodes records who drained it
and when, and the resume; the node's earlier GPU-lost fault then no longer drains it, its next one does, with
both as evidence. BootTime is the machine's boot (the test cluster's slurmds share this host): the boot recorded
is /proc/stat's btime, whatever the zone the command runs in (scontrol prints local times; it is run in UTC).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from attribution.drain.slurmctl import Scontrol, node_state_of_line

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent / "attribution"
UTC = timezone.utc
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _btime() -> datetime:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return datetime.fromtimestamp(int(line.split()[1]), UTC)
    raise AssertionError("no btime in /proc/stat")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm):
    base = tmp_path_factory.mktemp("sync")
    base.chmod(0o755)
    # its own ports: the hook tests' clusters of both versions may be alive at the same time
    c = slurm.cluster(base / "slurm", epilog=None, epilog_slurmctld=None, prolog=None, slurmctld_port=16857,
                      slurmdbd_port=16858, node_ports=(17041, 17042), mysql_port=13356, restd_port=16860)
    c.install()
    c.start()
    c.base = base
    c.clients = slurm.clients(c, base / "clients")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def db(pg_url):
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


def _ingest_fault(ruleset, engine, job_id: str, node: str, at: datetime) -> None:
    from attribution import frozen
    from attribution.pipeline.ingest import ingest
    from attribution.pipeline.rulecheck import events_for_line
    from attribution.scope.bundle import parse_context

    start, end = at - timedelta(minutes=30), at + timedelta(minutes=1)
    ctx = parse_context(f"cluster: attrtest\njob_id: '{job_id}'\nnodes: node[1-2]\nstate: FAILED\nuser: alice\n"
                        f"start: {start.isoformat()}\nend: {end.isoformat()}\n")
    ev = frozen.replace(events_for_line(ruleset, "kernel", XID79)[0], node=node, time=at, location="kernel.log:7")
    ingest(ruleset, engine, ctx, [ev], [], "bundle")


def _wait(predicate, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert predicate()


def test_scontrol_gives_states_reasons_who_and_boot_times(cluster):
    sc = Scontrol(path=str(cluster.clients / "scontrol"), env=dict(cluster.env(), TZ="Asia/Kolkata"))
    r = cluster.run(["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=by hand: fan noise"])
    assert r.returncode == 0, r.stderr
    try:
        nodes = sc.nodes()
        now = datetime.now(UTC)
        n1, n2 = nodes["node1"], nodes["node2"]
        assert "DRAIN" in n1.state and n1.reason == "by hand: fan noise" and n1.reason_user == "root"
        assert abs(n1.reason_at - now) < timedelta(minutes=1)  # UTC, though the caller's zone is +05:30
        assert n2.state == "IDLE" and n2.reason is None and n2.reason_user is None
        for n in (n1, n2):
            assert abs(n.boot_time - _btime()) <= timedelta(seconds=2)
            assert n.boot_time <= n.slurmd_start <= now
        line = cluster.run(["scontrol", "show", "node", "-o", "node1"]).stdout
        assert node_state_of_line(line).name == "node1" and " Reason=by hand: fan noise [root@" in line
    finally:
        cluster.resume("node1")


def test_a_node_resumed_with_scontrol_is_not_drained_again_for_what_came_before(cluster, db, ruleset, pg_url,
                                                                                tmp_path):
    now = datetime.now(UTC).replace(microsecond=0)
    _ingest_fault(ruleset, db, "9101", "node2", now - timedelta(minutes=20))
    (tmp_path / "config.yaml").write_text(f"database:\n  url: {pg_url}\n")
    env = dict(os.environ, ATTRIBUTION_CONFIG=str(tmp_path / "config.yaml"), ATTRIBUTION_HOME=str(tmp_path / "home"),
               SLURM_CONF=str(cluster.conf_path), TZ="America/New_York")
    sc = ["--scontrol", str(cluster.clients / "scontrol")]

    def cli(*args):
        r = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    assert "attrtest/node2" in cli("drain", "plan")
    first = cli("drain", "sync-nodes", *sc)
    assert "attrtest: 2 node(s) seen, 2 change(s) recorded" in first  # each node's boot
    # the operator takes node2 out and gives it back with Slurm's own tool, never with attribution
    r = cluster.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=gpu 3 reseated"])
    assert r.returncode == 0, r.stderr
    drained = cli("drain", "sync-nodes", *sc)
    assert re.search(r"Z  drain   attrtest/node2 +by root  IDLE\+DRAIN: gpu 3 reseated\n", drained), drained
    cluster.resume("node2")
    resumed = cli("drain", "sync-nodes", *sc)
    assert "resume  attrtest/node2" in resumed and "1 change(s)" in resumed
    assert cli("drain", "sync-nodes", *sc).endswith("0 change(s) recorded\n")
    assert "no node to drain" in cli("drain", "plan")
    page = cli("node", "node2")
    assert "gpu-lost: 1 event on gpu 0000:3b:00, but after it the node was resumed at " in page and "(Slurm)" in page
    with db.connect() as c:
        life = c.execute(text("SELECT what, source, actor FROM attribution.node_life WHERE node = 'node2' "
                              "AND cluster = 'attrtest' ORDER BY at, what")).all()
        boot = c.execute(text("SELECT at FROM attribution.node_life WHERE node = 'node2' AND what = 'boot'")).scalar()
    assert [tuple(r) for r in life] == [("boot", "slurm", None), ("drain", "slurm", "root"),
                                        ("resume", "slurm", None)]
    assert abs(boot - _btime()) <= timedelta(seconds=2)
    # its GPU falls off again: out, with both faults as the evidence of gpu-lost-again
    _ingest_fault(ruleset, db, "9102", "node2", datetime.now(UTC).replace(microsecond=0))
    applied = cli("drain", "apply", *sc)
    assert "applied     attrtest/node2" in applied
    _wait(lambda: cluster.drained_nodes() == ["node2"])
    plan = json.loads(cli("drain", "plan", "--json"))
    ev = {e["condition"]: e for e in plan[0]["evidence"]}
    assert [j["job_id"] for j in ev["gpu-lost-again"]["jobs"]] == ["9101", "9102"]
    assert [j["job_id"] for j in ev["gpu-lost"]["jobs"]] == ["9102"]
    cli("drain", "resume", "node2", *sc)
    _wait(lambda: cluster.drained_nodes() == [])
