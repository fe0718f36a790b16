"""`attribution diagnose --slurm-job` and `attribution backfill` on a real Slurm cluster with slurmdbd and
MariaDB (tests/harness/slurm.py, with_accounting=True), the store on the test PostgreSQL; once on Slurm 22.05 and
once on 24.11 (the ``slurm`` fixture: its sacct and scontrol first on PATH).

The jobs: a 2-node job whose ranks time out after the GPU of node2 fell off the bus (the node's kernel log is a file
the `files` connector reads), a completed job, a 2-task array job with an application error, a cancelled job, and
one still running while a test asks about it.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from attribution.cli import main
from attribution.config import ConnectorSettings
from attribution.scope.schedulers import sacct_jobs
from attribution.scope.slurmjson import json_capable, version_of

pytestmark = pytest.mark.slurm
UTC = timezone.utc

WATCHDOG = ("[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.")


def _sacct_has_ended(cluster, job_id: str, rows_expected: int = 1, timeout: float = 30) -> None:
    """slurmdbd records a job's end a moment after slurmctld (an array's tasks even later): wait for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = cluster.run(["sacct", "-P", "-n", "-X", "-j", job_id, "--format=State,End"])
        rows = [ln.split("|") for ln in r.stdout.splitlines() if ln.strip()]
        if len(rows) >= rows_expected and all(row[1] not in ("", "Unknown") for row in rows):
            return
        time.sleep(0.2)
    raise AssertionError(f"sacct never showed job {job_id} as ended")


@pytest.fixture(scope="module")
def live(tmp_path_factory, slurm):
    base = tmp_path_factory.mktemp("sacct")
    base.chmod(0o755)
    cluster = slurm.cluster(base / "slurm", with_accounting=True)
    try:
        cluster.install()
    except Exception as exc:  # no packages and no apt-get
        pytest.skip(f"Slurm with accounting cannot be installed here: {exc}")
    old_conf, old_path = os.environ.get("SLURM_CONF"), os.environ.get("PATH", "")
    cluster.start()
    os.environ["SLURM_CONF"] = str(cluster.conf_path)
    os.environ["PATH"] = f"{slurm.clients(cluster, base / 'clients')}:{old_path}"
    try:
        started = datetime.now(UTC).replace(microsecond=0)
        logs = base / "kernel"
        for node in cluster.nodes:
            (logs / node).mkdir(parents=True)
            (logs / node / "kern.log").write_text(f"[{started:%a %b %e %H:%M:%S %Y}] Linux booted long ago\n")
        xid = (f"[{started:%a %b %e %H:%M:%S %Y}] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
               f"GPU has fallen off the bus.\n")
        with open(logs / "node2" / "kern.log", "a") as f:
            f.write(xid)
        script = base / "train.sh"
        script.write_text("#!/bin/bash\nsrun hostname >/dev/null\n"
                          + "".join(f"echo '{WATCHDOG.format(r=r)}'\n" for r in range(4)) + "exit 3\n")
        script.chmod(0o755)
        jobs = {
            "gpu": cluster.sbatch(["-N2", "--ntasks-per-node=2", "--gres=gpu:2", str(script)]),
            "ok": cluster.sbatch(["-N1", "--wrap", "echo fine"]),
            "array": cluster.sbatch(["-N1", "--array=1-2", "--wrap",
                                     "echo 'RuntimeError: CUDA error: an illegal memory access was encountered'; "
                                     "exit 1"]),
            "cancel": cluster.sbatch(["-N1", "--wrap", "sleep 300"]),
        }
        for name in ("gpu", "ok"):
            cluster.wait_job(jobs[name])
        time.sleep(0.5)
        cluster.run(["scancel", jobs["cancel"]])
        for name in ("gpu", "ok", "array", "cancel"):
            _sacct_has_ended(cluster, jobs[name], rows_expected=2 if name == "array" else 1)
        # a whole second after these jobs ended and before any later test's job ends (sacct has whole seconds)
        ended = (datetime.now(UTC) + timedelta(seconds=1)).replace(microsecond=0)
        time.sleep((ended - datetime.now(UTC)).total_seconds() + 0.1)
        cluster.ended = ended
        cluster.jobs = jobs
        cluster.started = started
        cluster.logs = logs
        yield cluster
    finally:
        if old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old_conf
        os.environ["PATH"] = old_path
        cluster.stop()


def test_sacct_lists_jobs_not_steps_and_copes_with_22_05_fields(live):
    jobs = sacct_jobs(ConnectorSettings(), since=live.started - timedelta(minutes=5),
                      until=datetime.now(UTC) + timedelta(minutes=1))
    ids = {j.display_id: j for j in jobs}
    gpu = ids[live.jobs["gpu"]]
    assert gpu.state == "FAILED" and gpu.get("ExitCode") == "3:0" and gpu.tasks == 4
    # 24.11 is read through sacct --json (its expanded output path is only there), 22.05 through the text
    json_used = json_capable(version_of(live.version))
    assert json_used == (live.version.startswith("24.")) and (gpu.get("StdOut") is not None) == json_used
    if json_used:
        assert gpu.get("StdOut") == f"{live.work_dir}/slurm-{live.jobs['gpu']}.out"
    assert ids[live.jobs["ok"]].state == "COMPLETED"
    assert {f"{live.jobs['array']}_1", f"{live.jobs['array']}_2"} <= set(ids)
    assert ids[live.jobs["cancel"]].state == "CANCELLED"
    assert not any("." in d for d in ids)


def test_diagnose_a_slurm_job_from_sacct_its_output_and_the_configured_files(live):
    r = CliRunner().invoke(main, ["diagnose", "--slurm-job", live.jobs["gpu"], "--json",
                                  "--files", f"kernel={live.logs}/$node/kern.log"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["job"]["cluster"] == "attrtest" and doc["job"]["nodes"] == ["node1", "node2"]
    assert (doc["job"]["state"], doc["job"]["exit_code"]) == ("FAILED", "3:0")
    assert doc["outcome"] == "gpu_hardware"
    assert doc["culprits"] == [{"node": "node2", "gpu": "0000:3b:00", "evidence": "system"}]
    assert doc["symptom_groups"] and {g["kind"] for g in doc["symptom_groups"]} == {"nccl_watchdog_timeout"}
    out = [c for c in doc["coverage"] if c["source"] == "job"]
    assert out[0]["status"] == "ok" and out[0]["file"].endswith(f"slurm-{live.jobs['gpu']}.out")


def test_an_array_task_by_its_array_id(live):
    task = f"{live.jobs['array']}_2"
    r = CliRunner().invoke(main, ["diagnose", "--slurm-job", task, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["outcome"] == "application" and doc["root_cause"]["kind"] == "cuda_illegal_address"
    assert any(c["file"].endswith(f"slurm-{task}.out") and c["status"] == "ok" for c in doc["coverage"]
               if c["source"] == "job")


def test_a_running_job_or_an_unknown_one_is_bad_input(live):
    running = live.sbatch(["-N1", "--wrap", "sleep 120"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = CliRunner().invoke(main, ["diagnose", "--slurm-job", running])
            if "still RUNNING" in r.output or "still PENDING" in r.output:
                break
            time.sleep(0.3)
        assert r.exit_code == 2 and "once it has ended" in r.output
    finally:
        live.run(["scancel", running])
    r = CliRunner().invoke(main, ["diagnose", "--slurm-job", "999999"])
    assert r.exit_code == 2 and "not in the accounting database" in r.output


def test_backfill_stores_every_failed_job_once_and_resumes(live, pg_url, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {pg_url}\nconnectors:\n  files:\n    - {{path: '{live.logs}/$node/kern.log', "
                   f"source: kernel}}\n")
    since = (live.started - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    # until the fixture's jobs had ended: a job another test cancels meanwhile stays out of both runs
    args = ["--config", str(cfg), "backfill", "--since", since, "--until", live.ended.strftime("%Y-%m-%dT%H:%M:%S")]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    failed = int(re.search(r"(\d+) failed job\(s\) ended", first.output).group(1))
    assert failed == 4  # the GPU job, two array tasks, the cancelled job
    assert f"stored {failed} verdict(s)" in first.output and "skipped 0 already stored" in first.output
    from sqlalchemy import create_engine

    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT j.job_id, j.state, j.context_source, v.outcome FROM attribution.jobs j "
                "JOIN attribution.verdicts v ON v.id = j.current_verdict_id ORDER BY j.job_id")).all()
    finally:
        engine.dispose()
    by_id = {r[0]: r for r in rows}
    assert len(rows) == failed and live.jobs["ok"] not in by_id  # completed: nothing to diagnose
    assert by_id[live.jobs["gpu"]][1:] == ("FAILED", "sacct", "gpu_hardware")
    assert by_id[live.jobs["cancel"]][1] == "CANCELLED"
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and f"stored 0 verdict(s); skipped {failed} already stored" in again.output
    redo = CliRunner().invoke(main, args + ["--redo"])
    assert f"stored {failed} verdict(s)" in redo.output


def test_backfill_keeps_what_loki_served_and_a_pack_with_a_rule_for_its_unknown_kernel_line_changes_the_job(
        live, pg_url, tmp_path):
    """Loki serves, for the GPU job only (its kernel streams carry the job id: a configured selector), a kernel
    line no shipped rule knows on node2, without a time of its own: backfill stores the job as `unknown` with the
    line kept; `rules diff` with a pack that adds a rule for it lists exactly that job, unknown -> gpu_hardware,
    and `reattribute` makes it so."""
    from tests.conftest import ROOT
    from tests.harness.loki import FakeLoki
    from tests.harness.replay import UNKNOWN_LINE, pack_with_new_rule

    gpu = live.jobs["gpu"]
    at = int((live.started + timedelta(seconds=1)).timestamp()) * 1_000_000_000
    since = (live.started - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    with FakeLoki() as loki:
        loki.add_stream({"host": "node2", "source": "kernel", "job_id": gpu}, [(at, UNKNOWN_LINE)])
        cfg = tmp_path / "config.yaml"
        cfg.write_text(f"database:\n  url: {pg_url}\nconnectors:\n  loki:\n    url: {loki.url}\n    sources: [kernel]\n"
                       f"    selectors: {{kernel: '{{host=$node, source=\"kernel\", job_id=$job_id}}'}}\n")
        r = CliRunner().invoke(main, ["--config", str(cfg), "backfill", "--since", since,
                                      "--until", live.ended.strftime("%Y-%m-%dT%H:%M:%S")])
    assert r.exit_code == 0, r.output
    from sqlalchemy import create_engine

    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text(
                "SELECT v.outcome FROM attribution.jobs j JOIN attribution.verdicts v ON v.id = j.current_verdict_id "
                "WHERE j.job_id = :j"), {"j": gpu}).scalar_one() == "unknown"
    finally:
        engine.dispose()
    same = CliRunner().invoke(main, ["--config", str(cfg), "rules", "diff", str(ROOT / "rules"), "--json"])
    assert json.loads(same.output)["changed"] == 0, same.output
    pack = pack_with_new_rule(ROOT, tmp_path / "pack")
    out = json.loads(CliRunner().invoke(main, ["--config", str(cfg), "rules", "diff", str(pack), "--json"]).output)
    assert out["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}], out
    assert [(j["job_id"], j["after"]["root_node"], j["after"]["culprits"]) for j in out["jobs"]] == [
        (gpu, "node2", ["node2"])]
    r = CliRunner().invoke(main, ["--config", str(cfg), "reattribute", "--rules", str(pack), "--json"])
    assert json.loads(r.output)["totals"] == [{"transition": "unknown -> gpu_hardware", "jobs": 1}], r.output
    again = CliRunner().invoke(main, ["--config", str(cfg), "rules", "diff", str(pack), "--json"])
    assert json.loads(again.output)["changed"] == 0
