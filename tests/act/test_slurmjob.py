"""Telling a job's owner and requeueing it around its culprit node, on a real Slurm with accounting (once on 22.05,
once on 24.11: the ``slurm`` fixture), through the controller's real hook (hooks/epilog-slurmctld running
`attribution epilog` into the test PostgreSQL) and `attribution requeue`.

The job runs on one node; while it runs, that node's kernel reports a GPU falling off the bus (the piece a node's
collector sends, stored as the service stores it), and the job exits 1. What Slurm then shows is read back from
Slurm itself: `sacct -o AdminComment` for the run that failed, `scontrol show job` for the job requeued without
the node, and the run after it on the other node. Requeued jobs wait `cred_expire` seconds before they may start
(120 by default): the cluster sets 10.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ROOT
from tests.harness.hooknode import drop_safe_dir, safe_dir
from tests.harness.requeue import requeue_cluster, wait_until

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent / "attribution"
UTC = timezone.utc
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
#: the job: fails its first run a few seconds in, succeeds when it runs again (SLURM_RESTART_COUNT is set then)
JOB = "#!/bin/bash\n[ -n \"$SLURM_RESTART_COUNT\" ] && { echo rerun on $(hostname); exit 0; }\nsleep 6\nexit 1\n"
LINE = ("attribution: gpu_hardware, GPU 0000:3b:00 on {node} fell off the PCIe bus (Xid 79); not the application; "
        "{advice}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm):
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "attribution")], check=True,
                   capture_output=True, timeout=300)
    base = tmp_path_factory.mktemp("jobactions")
    base.chmod(0o755)
    etc = safe_dir()  # hook.env where hooks/lib.sh reads it: a folder only root can change (mounted in the root)
    (etc / "hook.env").write_text(f"ATTRIBUTION_CTLD_BIN={BIN}\nATTRIBUTION_BUDGET=40\n"
                                  f"ATTRIBUTION_LOG={base}/hooks.log\nATTRIBUTION_CONFIG={etc}/config.yaml\n"
                                  f"ATTRIBUTION_HOME={base}/home\nSLURM_CONF={base}/slurm/slurm.conf\n")
    (etc / "hook.env").chmod(0o644)
    hook = etc / "epilog-slurmctld.sh"  # what slurm.conf names: the real hook, pointed at the test's hook.env
    hook.write_text(f"#!/bin/bash\nATTRIBUTION_HOOK_ENV={etc}/hook.env exec {ROOT / 'hooks' / 'epilog-slurmctld'}\n")
    hook.chmod(0o755)
    c = requeue_cluster(slurm, base / "slurm", epilog=None, epilog_slurmctld=str(hook), prolog=None,
                        prolog_epilog_timeout=60, binds=[*slurm.binds, etc], slurmctld_port=16867,
                        slurmdbd_port=16868, node_ports=(17051, 17052), mysql_port=13366, restd_port=16870)
    c.base, c.etc = base, etc
    c.clients = slurm.clients(c, base / "clients")
    try:
        yield c
    finally:
        c.stop()
        drop_safe_dir(etc)


def _configure(cluster, pg_url: str, **job_actions) -> dict:
    """The controller hook's configuration (its Slurm commands are the ones inside its root), and the environment
    of a command run here, whose configuration names this host's commands for that Slurm."""
    for name, folder in (("config.yaml", "/usr/bin"), ("cli-config.yaml", str(cluster.clients))):
        actions = {"scontrol": f"{folder}/scontrol", "sacctmgr": f"{folder}/sacctmgr", **job_actions}
        (cluster.etc / name).write_text(json.dumps({"database": {"url": pg_url}, "cluster": "attrtest",
                                                    "job_actions": actions}))
    return dict(os.environ, ATTRIBUTION_CONFIG=str(cluster.etc / "cli-config.yaml"),
                ATTRIBUTION_HOME=str(cluster.base / "home"), SLURM_CONF=str(cluster.conf_path), TZ="UTC")


@pytest.fixture
def db(pg_url):
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()



def _submit_failing_on_a_lost_gpu(cluster, ruleset, db, *flags: str) -> tuple[str, str]:
    """A job that fails, and the GPU-lost fault its node's kernel reported while it ran; (job id, its node)."""
    from attribution import frozen
    from attribution.pipeline.ingest import ingest
    from attribution.pipeline.rulecheck import events_for_line
    from attribution.scope.bundle import parse_context

    jobs = cluster.base / "jobs"
    jobs.mkdir(exist_ok=True)
    script = jobs / f"job{len(list(jobs.glob('*.sh')))}.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    job = cluster.sbatch(["-N1", *flags, f"-o{jobs}/slurm-%j.out", str(script)])
    info = wait_until(lambda: (i := cluster.job_info(job)) and i.get("JobState") == "RUNNING" and i, 60,
                      "the job to run")
    node, start = info["NodeList"], datetime.fromisoformat(info["StartTime"]).replace(tzinfo=UTC)
    at = datetime.now(UTC).replace(microsecond=0)
    ctx = parse_context(f"cluster: attrtest\njob_id: '{job}'\nnodes: [{node}]\nstate: RUNNING\n"
                        f"start: {start.isoformat()}\nend: {(at + timedelta(minutes=1)).isoformat()}\n")
    ev = frozen.replace(events_for_line(ruleset, "kernel", XID79)[0], node=node, time=at, location="kernel.log:3")
    ingest(ruleset, db, ctx, [ev], [], "node")
    return job, node


def _hook_lines(cluster, job: str) -> list[str]:
    log = cluster.base / "hooks.log"
    return [ln for ln in (log.read_text().splitlines() if log.exists() else [])
            if f"controller job {job};" in ln]


def _sacct(cluster, job: str) -> list[list[str]]:
    r = cluster.run(["sacct", "-D", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,NodeList,AdminComment"])
    assert r.returncode == 0, r.stderr
    return [ln.split("|") for ln in r.stdout.splitlines() if ln]


def _recorded(cluster, line: str) -> str:
    """The line as the accounting record keeps it: Slurm 22.05's sacctmgr lowercases the AdminComment it sets
    (24.11's keeps it as given; both measured)."""
    return line.lower() if cluster.major_minor == (22, 5) else line


def _audit(db, job: str) -> list[tuple]:
    with db.connect() as c:
        return [tuple(r) for r in c.execute(text(
            "SELECT action, decision, cause, nodes, detail, actor FROM attribution.job_actions WHERE job_id = :j "
            "ORDER BY id"), {"j": job})]


def test_the_epilog_tells_the_owner_and_requeues_the_job_once_without_its_culprit_node(cluster, ruleset, db,
                                                                                      pg_url):
    _configure(cluster, pg_url, admin_comment=True, requeue=True)
    job, node = _submit_failing_on_a_lost_gpu(cluster, ruleset, db, "--requeue")
    other = next(n for n in cluster.nodes if n != node)
    line = LINE.format(node=node, advice=f"requeued without {node}")
    logged = wait_until(lambda: _hook_lines(cluster, job), 90, "the controller's hook")
    assert "; stored; AdminComment set (sacctmgr); requeued without " + node + ";" in logged[0], logged
    # the run that failed: its accounting record has the line, for its owner's `sacct`
    rows = wait_until(lambda: (r := _sacct(cluster, job)) and r[0][1] == "REQUEUED" and r[0][3] and r, 30, "sacct")
    assert rows[0] == [job, "REQUEUED", node, _recorded(cluster, line)]
    # the job again: pending or run without the node, the line on the live job too
    info = cluster.job_info(job)
    assert info["ExcNodeList"] == node and info["Restarts"] == "1" and info["Requeue"] == "1"
    assert f"AdminComment={line} " in cluster.run(["scontrol", "show", "job", "-o", job]).stdout
    assert cluster.wait_job(job, timeout=150) == "COMPLETED"
    assert cluster.job_info(job)["NodeList"] == other
    assert _audit(db, job) == [  # the requeue's row first: written before any Slurm call
        ("requeue", "applied", f"gpu_fallen_off_bus@{node}/0000:3b:00", [node], "policy met", "epilog"),
        ("admin_comment", "applied", None, None, line, "epilog")]
    # once: the run after it ended clean, and the same cause of the same job is never requeued again
    env = _configure(cluster, pg_url, admin_comment=True)
    r = subprocess.run([str(BIN), "requeue", "plan", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    plan = {p["job_id"]: p for p in json.loads(r.stdout)}
    assert plan[job]["decision"] == "skipped" and plan[job]["detail"].startswith("already requeued for this cause")
    assert [x[2] for x in _sacct(cluster, job)] == [node, other]


def test_requeue_apply_requeues_a_job_that_allows_it_and_leaves_the_other(cluster, ruleset, db, pg_url):
    env = _configure(cluster, pg_url, admin_comment=True)  # the hooks tell the owners; nothing requeues by itself
    allows, node_a = _submit_failing_on_a_lost_gpu(cluster, ruleset, db, "--requeue")
    refuses, node_b = _submit_failing_on_a_lost_gpu(cluster, ruleset, db, "--no-requeue")
    for job, node in ((allows, node_a), (refuses, node_b)):
        logged = wait_until(lambda: _hook_lines(cluster, job), 90, "the controller's hook")
        assert "; stored; AdminComment set (sacctmgr);" in logged[0], logged
        rows = wait_until(lambda: (r := _sacct(cluster, job)) and r[0][3] and r, 30, "sacct")
        assert rows[0] == [job, "FAILED", node, _recorded(cluster, LINE.format(node=node, advice="resubmit"))]

    def cli(*args):
        r = subprocess.run([str(BIN), "requeue", *args, "--scontrol", str(cluster.clients / "scontrol"), "--json"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return {row["job_id"]: row for row in json.loads(r.stdout)}

    dry = cli("apply", "--dry-run")
    assert dry[allows]["decision"] == "would requeue" and dry[allows]["exclude"] == [node_a]
    assert dry[refuses]["decision"] == "skipped" and "does not allow requeue (Requeue=0" in dry[refuses]["detail"]
    assert [a[0] for a in _audit(db, allows)] == ["admin_comment"]  # a dry run records nothing
    assert cluster.job_info(allows)["JobState"] == "FAILED"
    done = cli("apply")
    assert done[allows]["decision"] == "requeued" and done[refuses]["decision"] == "skipped"
    info = cluster.job_info(allows)
    assert info["ExcNodeList"] == node_a and info["Restarts"] == "1"
    assert cluster.job_info(refuses)["JobState"] == "FAILED"
    again = cli("apply")
    assert again[allows]["decision"] == "skipped" and "already requeued for this cause" in again[allows]["detail"]
    cause = f"gpu_fallen_off_bus@{node_a}/0000:3b:00"
    requeued_line = LINE.format(node=node_a, advice=f"requeued without {node_a}")
    rows = _audit(db, allows)
    assert [r[:4] for r in rows] == [("admin_comment", "applied", None, None), ("requeue", "applied", cause, [node_a]),
                                     ("admin_comment", "applied", None, None), ("requeue", "skipped", cause, [node_a])]
    assert rows[0][4] == LINE.format(node=node_a, advice="resubmit") and rows[2][4] == requeued_line
    assert rows[0][5] == "epilog" and rows[1][5] == rows[2][5] != "epilog"  # the CLI's user
    assert [a[1] for a in _audit(db, refuses) if a[0] == "requeue"] == ["skipped"]  # the same skip, recorded once
    assert _sacct(cluster, allows)[0] == [allows, "REQUEUED", node_a, _recorded(cluster, requeued_line)]
    log = subprocess.run([str(BIN), "requeue", "log", "--cluster", "attrtest"], env=env, capture_output=True,
                         text=True, timeout=120).stdout.splitlines()
    assert any(f"requeue       applied  attrtest/{allows} without {node_a}  {cause}  policy met" in ln for ln in log)
    assert cluster.wait_job(allows, timeout=150) == "COMPLETED"
