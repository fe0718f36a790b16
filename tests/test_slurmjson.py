"""attribution/scope/slurmjson.py and the 24.11 epilog environment, on outputs recorded from the real Slurm 24.11.5 of
the Debian 13 root (tests/data/slurm24, how they were made: docs/slurm.md): the JSON and the text of the same jobs
must tell the same story, and the hooks, sacct and scontrol must agree on every job's id."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from attribution.errors import InputError
from attribution.scope.sacct import context_of, parse_sacct
from attribution.scope.slurm import final_state, job_window, parse_env, parse_scontrol_job
from attribution.scope.slurmjson import (base_state, exit_code, json_capable, num, parse_sacct_json,
                                   parse_scontrol_job_json, version_of)

DATA = Path(__file__).resolve().parent / "data" / "slurm24"
UTC = timezone.utc
JOBS = json.loads((DATA / "jobs.json").read_text())  # what was submitted: name -> job id sbatch printed


def _env(name: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in (DATA / name).read_text().splitlines() if "=" in ln)


def test_versions_and_which_may_use_json():
    assert version_of((DATA / "sacct-version.txt").read_text()) == (24, 11)
    assert json_capable((24, 11)) and json_capable((23, 2)) and not json_capable((22, 5))
    assert not json_capable(version_of("nonsense"))


def test_number_and_exit_code_objects():
    assert num({"set": True, "infinite": False, "number": 5}) == 5
    assert num({"set": False, "number": 0}) is None and num({"set": True, "infinite": True, "number": 0}) is None
    assert num(7) == 7 and num(True) is None
    assert exit_code({"status": ["ERROR"], "return_code": {"set": True, "number": 3},
                      "signal": {"id": {"set": False, "number": 0}, "name": ""}}) == "3:0"
    assert exit_code({"status": ["SIGNALED"], "return_code": {"set": False, "number": 0},
                      "signal": {"id": {"set": True, "number": 15}, "name": "TERM"}}) == "0:15"
    assert exit_code({"status": ["ERROR"], "return_code": 2}) == "2:0"  # v0.0.39: a plain number
    assert base_state(["TIMEOUT", "COMPLETING"]) == "TIMEOUT" and base_state(["COMPLETING"]) == "COMPLETING"


def test_sacct_json_and_text_of_the_same_jobs_agree():
    js = {j.job_id: j for j in parse_sacct_json((DATA / "sacct.json").read_text())}
    txt = {j.job_id: j for j in parse_sacct((DATA / "sacct.txt").read_text())}
    assert set(js) == set(txt) == {"1", "2", "3", "4", "5", "6", "7", "8"}
    for jid, t in txt.items():
        j = js[jid]
        assert j.display_id == t.display_id, jid
        assert j.state == t.state, jid  # the text's "CANCELLED by 0" is CANCELLED too
        for f in ("ExitCode", "DerivedExitCode", "Start", "End", "NodeList", "Cluster", "WorkDir", "User"):
            assert j.get(f) == t.get(f), (jid, f, j.get(f), t.get(f))
        assert context_of(j) == context_of(t), jid
    assert {context_of(j).job_name for j in js.values()} == {context_of(t).job_name for t in txt.values()} != {None}
    # 24.11's JSON exit codes are right (22.05's said SUCCESS for this job)
    assert js[JOBS["fail2"]].get("ExitCode") == "3:0" and js[JOBS["fail2"]].get("DerivedExitCode") == "5:0"
    assert js[JOBS["fail2"]].tasks == txt[JOBS["fail2"]].tasks == 4


def test_sacct_json_gives_the_expanded_output_files():
    js = {j.job_id: j for j in parse_sacct_json((DATA / "sacct.json").read_text())}
    fail2 = js[JOBS["fail2"]]
    assert fail2.get("StdOut") == f"{fail2.get('WorkDir')}/out-{JOBS['fail2']}.txt"  # sbatch -o .../out-%j.txt
    assert js[JOBS["timeout"]].state == "TIMEOUT" and js[JOBS["cancel"]].state == "CANCELLED"


def test_array_and_het_job_ids_agree_between_hooks_and_sacct():
    js = {j.display_id: j for j in parse_sacct_json((DATA / "sacct.json").read_text())}
    array, het = JOBS["array"], JOBS["het"]
    # array task 1 was given a job id of its own (8); the node epilog has no SLURM_ARRAY_* at all
    node, ctld = parse_env(_env("epilog-array-task-node1.env")), parse_env(_env("epilogctld-array-task.env"))
    assert node.job_id == ctld.job_id == js[f"{array}_1"].job_id == "8"
    assert node.array_job_id is None and (ctld.array_job_id, ctld.array_task_id) == (array, "1")
    assert js[f"{array}_2"].job_id == array
    # a heterogeneous job: each component its own id, both carry the leader's
    c0, c1 = parse_env(_env("epilog-het-0-node1.env")), parse_env(_env("epilog-het-1-node2.env"))
    assert (c0.job_id, c1.job_id) == (js[f"{het}+0"].job_id, js[f"{het}+1"].job_id) == (het, str(int(het) + 1))
    assert c0.het_job_id == c1.het_job_id == het
    assert parse_env(_env("epilogctld-het-0.env")).het_job_id == het


def test_a_requeued_job_is_its_last_run():
    """`scontrol requeue` of a running job: the same id runs again (after Slurm's 2-minute requeue delay);
    `sacct -D` lists both runs."""
    txt = (DATA / "sacct-requeued-D.txt").read_text()
    assert [ln.split("|")[2] for ln in txt.splitlines()[1:] if "." not in ln.split("|")[0]] == ["REQUEUED", "FAILED"]
    for jobs in (parse_sacct(txt), parse_sacct_json((DATA / "sacct-requeued-D.json").read_text())):
        assert len(jobs) == 1
        j = jobs[0]
        assert (j.job_id, j.state, j.get("ExitCode"), j.get("Start")) == ("1", "FAILED", "4:0", "2026-12-01T09:40:06")
    assert parse_sacct_json((DATA / "sacct-requeued-D.json").read_text())[0].get("Restarts") == "1"


def test_epilog_environment_of_24_11_gives_the_job_window():
    env = parse_env(_env("epilog-failed-node1.env"))
    assert env.context == "epilog_slurmd" and env.node == "node1" and env.nodes == ("node1", "node2")
    assert env.exit_code == "3:0" and env.gpus == "0,1" and env.restart_count == 0
    w = job_window(env, datetime(2030, 1, 1, tzinfo=UTC), None, 86400)
    assert w.how == "slurm" and w.start == datetime.fromtimestamp(int(_env("epilog-failed-node1.env")
                                                                      ["SLURM_JOB_START_TIME"]), tz=UTC)
    ctld = parse_env(_env("epilogctld-failed.env"))
    assert ctld.is_controller and ctld.start == env.start and ctld.end == env.end and ctld.job_name == "twonode"
    # the prolog sees an END_TIME too: the start plus the time limit (a year for UNLIMITED), not an end
    prolog = parse_env(_env("prolog-node1.env"))
    assert prolog.start == env.start and (prolog.end - prolog.start).days >= 365


@pytest.mark.parametrize("name,state,reason,code", [
    ("scontrol-job-timeout-in-epilog.json", "TIMEOUT", "TimeLimit", "0:15"),
    ("scontrol-job-cancelled-in-epilog.json", "CANCELLED", "None", "0:15"),
    ("scontrol-job-failed-in-epilog.json", "FAILED", "NonZeroExitCode", "3:0"),
])
def test_scontrol_json_inside_the_epilog_already_knows_the_final_state(name, state, reason, code):
    info = parse_scontrol_job_json((DATA / name).read_text())
    assert (info["JobState"], info["Reason"], info["ExitCode"]) == (state, reason, code)
    assert info["SlurmRelease"] == "24.11.5" and info["StdOut"].startswith("/")
    assert final_state(info, "0:0") == state


def test_the_text_of_the_same_moment_says_completing():
    text = parse_scontrol_job((DATA / "scontrol-job-timeout-in-epilog.txt").read_text())
    assert text["JobState"] == "COMPLETING" and text["Reason"] == "TimeLimit"
    json_info = parse_scontrol_job_json((DATA / "scontrol-job-timeout-in-epilog.json").read_text())
    for key in ("JobId", "NodeList", "NumTasks", "StdOut", "StdErr", "WorkDir", "Partition", "StartTime", "EndTime"):
        assert json_info[key] == text[key], key


def test_bad_json_is_one_clear_error():
    with pytest.raises(InputError, match="not JSON"):
        parse_sacct_json("{nope")
    with pytest.raises(InputError, match="no 'jobs' list"):
        parse_sacct_json('{"meta": {}}')
    with pytest.raises(InputError, match="Invalid job id"):
        parse_scontrol_job_json('{"jobs": [], "errors": [{"description": "Invalid job id specified"}]}')
