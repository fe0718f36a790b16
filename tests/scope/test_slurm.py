"""slurm.py: the epilog environment, job windows, scontrol output and output-file patterns (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pathlib import Path

from attribution.scope.slurm import (controller_context, decode_wait_status, expand_output_pattern, final_state,
                                     implied_state, job_output_paths, job_window, node_context, parse_env,
                                     parse_scontrol_job)

UTC = timezone.utc
NOW = datetime(2026, 11, 30, 8, 33, 49, tzinfo=UTC)

# The node Epilog environment measured on Slurm 22.05 (docs/slurm.md), 2-node 2-GPU job.
NODE_ENV = {
    "CUDA_VISIBLE_DEVICES": "0,1", "SLURMD_NODENAME": "node1", "SLURM_CLUSTER_NAME": "feas", "SLURM_JOBID": "1",
    "SLURM_JOB_DERIVED_EC": "1280", "SLURM_JOB_EXIT_CODE2": "3:0", "SLURM_JOB_EXIT_CODE": "768",
    "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_ID": "1", "SLURM_JOB_PARTITION": "debug", "SLURM_JOB_USER": "root",
    "SLURM_JOB_STDOUT": "/scratch/out/job-%j.out", "SLURM_NODELIST": "node[1-2]",
    "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}
CTLD_ENV = {
    "SLURM_CLUSTER_NAME": "feas", "SLURM_JOBID": "1", "SLURM_JOB_EXIT_CODE2": "3:0", "SLURM_JOB_EXIT_CODE": "768",
    "SLURM_JOB_ID": "1", "SLURM_JOB_NAME": "twonode", "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_STDOUT": "/scratch/out/job-%j.out", "SLURM_JOB_WORK_DIR": "/scratch", "SLURM_JOB_USER": "root",
    "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}


@pytest.mark.parametrize("raw,code", [("768", "3:0"), ("11", "0:11"), ("0", "0:0"), ("256", "1:0"),
                                      ("34304", "134:0"), ("", None), ("x", None), (None, None)])
def test_raw_wait_status(raw, code):
    assert decode_wait_status(raw) == code


def test_node_epilog_environment():
    e = parse_env(NODE_ENV)
    assert (e.context, e.job_id, e.node, e.nodes, e.exit_code, e.failed) == \
        ("epilog_slurmd", "1", "node1", ("node1", "node2"), "3:0", True)
    assert not e.is_controller
    ctx = node_context(e, job_window(e, NOW, None, 3600), "feas", None)
    assert ctx.state == "FAILED" and ctx.gpus_per_node == 2 and ctx.start == NOW - timedelta(hours=1)


def test_exit_code_from_the_raw_status_when_the_formatted_one_is_missing():
    env = dict(NODE_ENV)
    del env["SLURM_JOB_EXIT_CODE2"]
    env["SLURM_JOB_EXIT_CODE"] = "11"
    assert parse_env(env).exit_code == "0:11"


def test_a_zero_exit_on_a_node_is_provisionally_completed():
    env = dict(NODE_ENV, SLURM_JOB_EXIT_CODE="0", SLURM_JOB_EXIT_CODE2="0:0")
    e = parse_env(env)
    assert not e.failed and node_context(e, job_window(e, NOW, None, 60), "c", None).state == "COMPLETED"


def test_window_sources_in_order():
    e = parse_env(dict(NODE_ENV, SLURM_JOB_START_TIME="1796020000", SLURM_JOB_END_TIME="1796020600"))
    w = job_window(e, NOW, NOW - timedelta(minutes=3), 3600)
    assert w.how == "slurm" and w.start == datetime.fromtimestamp(1796020000, UTC)
    e = parse_env(NODE_ENV)
    assert job_window(e, NOW, NOW - timedelta(minutes=3), 3600).how == "prolog"
    assert job_window(e, NOW, None, 3600).how == "lookback"


def test_not_under_slurm():
    with pytest.raises(ValueError):
        parse_env({})


SCONTROL = ("JobId=1 JobName=wrap UserId=root(0) GroupId=root(0) JobState=COMPLETING Reason=TimeLimit "
            "Dependency=(null) ExitCode=0:15 RunTime=00:01:20 TimeLimit=00:01:00 StartTime=2026-11-30T08:33:49 "
            "EndTime=2026-11-30T08:35:09 Partition=debug NodeList=node[1-2] BatchHost=node1 NumNodes=2 NumCPUs=2 "
            "NumTasks=16 StdOut=/scratch/out/job-1.out StdErr=/scratch/out/job-1.out")


def test_scontrol_line():
    info = parse_scontrol_job(SCONTROL)
    assert info["JobState"] == "COMPLETING" and info["NodeList"] == "node[1-2]" and info["NumTasks"] == "16"


@pytest.mark.parametrize("state,reason,code,final", [
    ("COMPLETING", "TimeLimit", "0:15", "TIMEOUT"),
    ("COMPLETING", "None", "0:15", "CANCELLED"),
    ("COMPLETING", "None", "3:0", "FAILED"),
    ("COMPLETING", "NodeDown", "0:0", "NODE_FAIL"),
    ("COMPLETING", "None", "0:0", "COMPLETED"),
    ("FAILED", "NonZeroExitCode", "3:0", "FAILED"),
    ("CANCELLED", "None", "0:0", "CANCELLED"),
])
def test_final_state(state, reason, code, final):
    assert final_state({"JobState": state, "Reason": reason, "ExitCode": code}, None) == final


def test_controller_context():
    e = parse_env(dict(CTLD_ENV, SLURM_JOB_EXIT_CODE="0", SLURM_JOB_EXIT_CODE2="0:0"))
    ctx = controller_context(e, parse_scontrol_job(SCONTROL), "feas", NOW)
    assert ctx.state == "TIMEOUT" and ctx.nodes == ("node1", "node2") and ctx.tasks_per_node == 8
    assert ctx.start == datetime(2026, 11, 30, 8, 33, 49, tzinfo=UTC)


def test_output_patterns():
    e = parse_env(dict(CTLD_ENV, SLURM_ARRAY_JOB_ID="40", SLURM_ARRAY_TASK_ID="7"))
    assert expand_output_pattern("/o/job-%j.out", e) == "/o/job-1.out"
    assert expand_output_pattern("%x-%A_%a.%u.log", e) == "/scratch/twonode-40_7.root.log"
    assert expand_output_pattern("/o/%N-%4j-%%.txt", e) == "/o/node1-0001-%.txt"
    assert expand_output_pattern("", parse_env(CTLD_ENV)) == "/scratch/slurm-1.out"


def test_the_job_name_comes_from_the_controller_epilog_else_scontrol_and_may_hold_spaces():
    """EpilogSlurmctld sees SLURM_JOB_NAME (docs/slurm.md: twonode); scontrol's JobName runs up to
    its next field, UserId; the node epilog has no name (Slurm does not set SLURM_JOB_NAME there)."""
    assert controller_context(parse_env(CTLD_ENV), parse_scontrol_job(SCONTROL), "feas", NOW).job_name == "twonode"
    env = {k: v for k, v in CTLD_ENV.items() if k != "SLURM_JOB_NAME"}
    spaced = SCONTROL.replace("JobName=wrap", "JobName=llama 70b run 3")
    assert parse_scontrol_job(spaced)["JobName"] == "llama 70b run 3"
    assert parse_scontrol_job(spaced)["UserId"] == "root(0)"
    assert controller_context(parse_env(env), parse_scontrol_job(spaced), "feas", NOW).job_name == "llama 70b run 3"
    assert controller_context(parse_env(env), {}, "feas", NOW).job_name is None
    e = parse_env(NODE_ENV)
    assert node_context(e, job_window(e, NOW, None, 3600), "feas", None).job_name is None


def test_job_output_paths_prefer_what_slurm_expanded_and_name_a_shared_file_once():
    e = parse_env(CTLD_ENV)
    assert job_output_paths(e, parse_scontrol_job(SCONTROL)) == [Path("/scratch/out/job-1.out")]
    assert job_output_paths(e, {"StdOut": "/o/a.out", "StdErr": "/o/a.err"}) == [Path("/o/a.out"), Path("/o/a.err")]


def test_job_output_paths_expand_the_environment_patterns_where_scontrol_did_not():
    e = parse_env(dict(CTLD_ENV, SLURM_JOB_STDERR="/o/%x-%j.err"))
    # scontrol unreachable ({}) or still printing a pattern: the epilog's own patterns, expanded
    assert job_output_paths(e, {}) == [Path("/scratch/out/job-1.out"), Path("/o/twonode-1.err")]
    assert job_output_paths(e, {"StdOut": "/x/%j.out"}) == [Path("/scratch/out/job-1.out"), Path("/o/twonode-1.err")]


def test_job_output_paths_default_name_and_no_dev_null():
    bare = {k: v for k, v in CTLD_ENV.items() if k != "SLURM_JOB_STDOUT"}
    assert job_output_paths(parse_env(bare), {}) == [Path("/scratch/slurm-1.out")]
    # no stderr pattern anywhere: stderr went with stdout, nothing more to read
    assert job_output_paths(parse_env(bare), {"StdOut": "/dev/null"}) == []


def test_the_state_a_banner_implies_ranks_a_requeue_after_the_time_limit_and_before_a_plain_cancel(ruleset):
    """While the controller still says COMPLETING, the banners decide: a requeue banner (or a framework's reported
    requeue) gives REQUEUED, a time-limit banner beside it wins, a requeue only attempted implies nothing."""
    from attribution.extract.events import extract
    from attribution.model import ExecutionContext, Observation

    ctx = ExecutionContext(cluster="c", job_id="608", nodes=("n1",), tasks_per_node=4)

    def state(*lines):
        obs = [Observation(source="job", node="n1", location=f"out:{i}", text=t, line=t) for i, t in enumerate(lines)]
        return implied_state(extract(ruleset, ctx, obs))

    requeue = "slurmstepd: error: *** JOB 608 ON n1 CANCELLED AT 2022-08-12T02:06:12 DUE TO JOB REQUEUE ***"
    cancel = "slurmstepd: error: *** STEP 608.0 ON n1 CANCELLED AT 2022-08-12T02:06:12 ***"
    limit = "slurmstepd: error: *** JOB 608 ON n1 CANCELLED AT 2022-08-12T02:06:12 DUE TO TIME LIMIT ***"
    assert state(cancel, requeue) == "REQUEUED"
    assert state(requeue, limit) == "TIMEOUT"
    assert state("submitit INFO (2022-07-12 04:18:45,912) - Requeued job 608 (3 remaining timeouts)") == "REQUEUED"
    assert state("Handling auto-requeue signal: 10", "requeing job 608...") is None
