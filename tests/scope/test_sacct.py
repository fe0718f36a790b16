"""sacct.py: `sacct -P` text (tests/data/sacct, real and spec-shaped) to jobs and execution contexts."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from attribution.errors import InputError
from attribution.scope.sacct import FIELDS, context_of, gpus_from_tres, is_step, parse_sacct, sacct_argv

from tests.conftest import ROOT

UTC = timezone.utc
DATA = ROOT / "tests" / "data" / "sacct"


def _jobs(name):
    return {j.display_id: j for j in parse_sacct((DATA / name).read_text(), name)}


def test_steps_are_not_jobs_and_array_tasks_are():
    jobs = _jobs("slurm-22.05-test-cluster.txt")
    assert list(jobs) == ["1", "2", "4", "3_1", "3_2"]
    assert jobs["3_1"].job_id == "5" and jobs["3_2"].job_id == "3"  # raw ids: what the epilogs see


def test_a_failed_two_node_job_from_a_real_22_05_cluster():
    j = _jobs("slurm-22.05-test-cluster.txt")["1"]
    assert (j.state, j.failed, j.tasks) == ("FAILED", True, 4)  # 4 tasks from its srun step 1.0
    ctx = context_of(j)
    assert ctx.cluster == "attrtest" and ctx.job_id == "1" and ctx.nodes == ("node1", "node2")
    assert ctx.exit_code == "3:0" and ctx.user == "root" and ctx.partition == "debug"
    assert ctx.start == datetime(2026, 11, 30, 10, 36, 56, tzinfo=UTC) and ctx.tasks_per_node == 2
    assert ctx.failed_node is None and ctx.gpus_per_node is None and ctx.scheduler == "slurm"
    assert ctx.job_name == "wrap"  # sacct's JobName (sbatch --wrap names the job so)


def test_completed_and_cancelled_jobs():
    jobs = _jobs("slurm-22.05-test-cluster.txt")
    assert not jobs["2"].failed and jobs["2"].ended
    assert jobs["4"].state == "CANCELLED" and jobs["4"].failed  # "CANCELLED by 0"


def test_gpus_node_failure_time_limit_and_jobs_that_did_not_end():
    jobs = _jobs("gpu-cluster.txt")
    big = context_of(jobs["731842"])
    assert big.nodes == ("hx-gpu017", "hx-gpu018", "hx-gpu019", "hx-gpu020")
    assert big.gpus_per_node == 8 and big.tasks_per_node == 8 and big.cluster == "helios"
    nf = context_of(jobs["731900"])
    assert nf.state == "NODE_FAIL" and nf.failed_node == "gpu010" and nf.gpus_per_node == 8  # typed GRES only
    assert nf.nodes == ("gpu001", "gpu002", "gpu010")
    assert jobs["731901"].state == "TIMEOUT" and jobs["731950_7"].state == "OUT_OF_MEMORY"
    assert not jobs["731960"].ended and not jobs["731960"].failed  # still running
    assert not jobs["731961_[3-9]"].failed  # pending array
    assert jobs["731962"].failed
    with pytest.raises(InputError, match="never ran"):
        context_of(jobs["731962"])


def test_a_cluster_name_is_only_a_fallback_for_sacct_s_own():
    j = _jobs("gpu-cluster.txt")["731842"]
    assert context_of(j, cluster="other").cluster == "helios"
    k = _jobs("async-diloco.txt")["4947951"]
    assert k.state == "FAILED" and k.get("Cluster") is None
    with pytest.raises(InputError, match="no nodes"):
        context_of(k, cluster="other")


def test_public_outputs_with_few_columns():
    jobs = _jobs("cluster_utils-87.txt")
    assert list(jobs) == ["239023"] and jobs["239023"].state == "COMPLETED"
    assert jobs["239023"].job_id == "239023"  # no JobIDRaw column: the JobID


@pytest.mark.parametrize("job_id,step", [("123", False), ("123_4", False), ("123_[5-10]", False), ("123+0", False),
                                         ("123.batch", True), ("123.extern", True), ("123.0", True),
                                         ("123_4.batch", True), ("123_4.12", True), ("123+1.0", True),
                                         ("123.interactive", True)])
def test_step_ids(job_id, step):
    assert is_step(job_id) is step


def test_gres_counts():
    assert gpus_from_tres("billing=4,cpu=4,gres/gpu:a100=2,gres/gpu=2,node=1") == 2
    assert gpus_from_tres("cpu=4,gres/gpu:a100=2,gres/gpu:v100=1") == 3
    assert gpus_from_tres("cpu=4,node=1") is None and gpus_from_tres(None) is None


def test_malformed_text_is_refused_with_its_line():
    with pytest.raises(InputError, match="not a sacct -P header"):
        parse_sacct("hello|world\n1|2\n")
    with pytest.raises(InputError, match="line 2: 3 fields"):
        parse_sacct("JobID|State\n1|FAILED|x\n")
    assert parse_sacct("") == []


def test_the_command_asks_for_one_job_or_a_range():
    assert sacct_argv("sacct", job="3_1")[:2] == ["sacct", "-P"] and sacct_argv("sacct", job="3_1")[-2:] == ["-j", "3_1"]
    argv = sacct_argv("/usr/bin/sacct", since=datetime(2026, 3, 1, tzinfo=UTC), until=datetime(2026, 3, 2, tzinfo=UTC))
    assert "--allusers" in argv and "--starttime=2026-03-01T00:00:00" in argv and "--endtime=2026-03-02T00:00:00" in argv
    assert argv[2] == "--format=" + ",".join(FIELDS)
