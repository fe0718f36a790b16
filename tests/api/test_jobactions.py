"""The service acting on the jobs reported to it (api/jobactions.py, `job_actions:`), on a real Slurm with accounting
(once on 22.05, once on 24.11: the ``slurm`` fixture) and a real `attribution serve` over the test PostgreSQL.

A job that allows requeue fails on one node; the controller, then the node's collector, report it to the service
(the observation documents their code makes: tests/harness/documents.py), the node's kernel log holding a GPU
falling off the bus during the job. On the controller's report alone the job failed for no known cause: its owner
is told so; the node's report changes the verdict, and the service sets the new line and requeues the job without
the node, once, through this host's Slurm commands for that cluster; the cluster's name comes from `scontrol show
config` (the configuration names none).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ROOT
from tests.harness.documents import controller_document, node_documents
from tests.harness.requeue import requeue_cluster, wait_until
from tests.harness.service import start_service

pytestmark = pytest.mark.slurm

UTC = timezone.utc
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
JOB = "#!/bin/bash\n[ -n \"$SLURM_RESTART_COUNT\" ] && exit 0\nsleep 4\nexit 1\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm):
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "attribution")], check=True,
                   capture_output=True, timeout=300)
    base = tmp_path_factory.mktemp("serviceactions")
    base.chmod(0o755)
    c = requeue_cluster(slurm, base / "slurm", epilog=None, epilog_slurmctld=None, prolog=None,
                        slurmctld_port=16877, slurmdbd_port=16878, node_ports=(17061, 17062), mysql_port=13376,
                        restd_port=16880)
    c.base = base
    c.clients = slurm.clients(c, base / "clients")
    try:
        yield c
    finally:
        c.stop()



def _bundle(cluster, job: str, folder):
    """The failed job as an incident bundle: its context as Slurm gives it, its output, its node's kernel log with
    the GPU lost two seconds after the start."""
    info = cluster.job_info(job)
    node = info["NodeList"]
    start = datetime.fromisoformat(info["StartTime"]).replace(tzinfo=UTC)
    end = datetime.fromisoformat(info["EndTime"]).replace(tzinfo=UTC)
    (folder / "job").mkdir(parents=True)
    (folder / "nodes" / node).mkdir(parents=True)
    (folder / "job" / f"slurm-{job}.out").write_bytes(open(info["StdOut"], "rb").read())
    at = start + timedelta(seconds=2)
    (folder / "nodes" / node / "kernel.log").write_text(f"{at:[%a %b %e %H:%M:%S %Y]} {XID79}\n")
    (folder / "context.yaml").write_text(
        f"cluster: attrtest\njob_id: '{job}'\nuser: root\nnodes: [{node}]\nstate: FAILED\nexit_code: '1:0'\n"
        f"start: {start.isoformat()}\nend: {end.isoformat()}\n")
    return node


def test_the_service_tells_the_owner_and_requeues_once_without_the_culprit(cluster, ruleset, pg_url, tmp_path,
                                                                          monkeypatch):
    script = tmp_path / "job.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    job = cluster.sbatch(["-N1", "--requeue", f"-o{tmp_path}/slurm-%j.out", str(script)])
    assert cluster.wait_job(job) == "FAILED"
    node = _bundle(cluster, job, tmp_path / "bundle")
    other = next(n for n in cluster.nodes if n != node)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf_path))  # what the service's Slurm commands read
    svc = start_service(pg_url, tmp_path / "service", settings={"job_actions": {
        "admin_comment": True, "requeue": True, "scontrol": str(cluster.clients / "scontrol"),
        "sacctmgr": str(cluster.clients / "sacctmgr")}})
    engine = create_engine(pg_url)
    try:
        def post(doc):
            r = httpx.post(svc.url + "/v1/observations", json=doc, headers=svc.auth("report"), timeout=60)
            assert r.status_code == 200, r.text

        def audit():
            with engine.connect() as c:
                return [tuple(r) for r in c.execute(text(
                    "SELECT action, decision, nodes, detail, actor FROM attribution.job_actions WHERE job_id = :j "
                    "ORDER BY id"), {"j": job})]

        def recorded(text: str) -> str:  # Slurm 22.05's sacctmgr lowercases it (measured; 24.11 keeps it)
            return text.lower() if cluster.major_minor == (22, 5) else text

        def first_run():
            r = cluster.run(["sacct", "-D", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,NodeList,AdminComment"])
            return r.stdout.splitlines()[0].split("|")

        post(controller_document(ruleset, tmp_path / "bundle"))
        unknown = ("attribution: unknown (low confidence), no fault event found, job state FAILED; cause not found; "
                   "the operators investigate")
        wait_until(lambda: first_run()[3] == recorded(unknown), 60, "the first line")
        assert audit() == [("admin_comment", "applied", None, unknown, "service")]
        assert cluster.job_info(job)["JobState"] == "FAILED"  # no culprit: not requeued
        (node_doc,) = node_documents(tmp_path / "bundle")
        post(node_doc)
        line = (f"attribution: gpu_hardware, GPU 0000:3b:00 on {node} fell off the PCIe bus (Xid 79); "
                f"not the application; requeued without {node}")
        rows = wait_until(lambda: (a := audit()) and len(a) >= 3 and a, 90, "the service's job actions")
        assert rows == [("admin_comment", "applied", None, unknown, "service"),
                        ("requeue", "applied", [node], "policy met", "service"),
                        ("admin_comment", "applied", None, line, "service")]
        info = wait_until(lambda: (i := cluster.job_info(job)) and i.get("ExcNodeList") == node and i, 30,
                          "the requeue")
        assert info["Restarts"] == "1"
        assert first_run() == [job, "REQUEUED", node, recorded(line)]
        assert cluster.wait_job(job, timeout=150) == "COMPLETED" and cluster.job_info(job)["NodeList"] == other
        assert f"job actions of attrtest/{job}: AdminComment set (sacctmgr); requeued without {node}" in \
            svc.log.read_text()
        assert audit() == rows  # once
    finally:
        engine.dispose()
        svc.stop()
