"""scontrol.py: the one runner of `scontrol show job` (its text and JSON forms, time and byte bounds, every failure
an empty answer) and the answer a hook saved, against a stand-in scontrol that prints what a real one printed."""

from __future__ import annotations

import json
from pathlib import Path

from attribution.scope import scontrol

LINE = ("JobId=77 JobName=train UserId=alice(1000) JobState=COMPLETING Reason=TimeLimit ExitCode=0:15 "
        "NodeList=g[1-2] StdOut=/home/alice/o-77.out StdErr=/home/alice/o-77.out WorkDir=/home/alice")


def fake(tmp_path: Path, body: str) -> str:
    """A stand-in scontrol: a shell script whose body sees the arguments as "$@"."""
    p = tmp_path / "scontrol"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)
    return str(p)


def test_show_job_runs_the_text_form_and_parses_it(tmp_path):
    args = tmp_path / "args"
    sc = fake(tmp_path, f'echo "$@" > {args}\necho "{LINE}"')
    info = scontrol.show_job("77", scontrol=sc)
    assert args.read_text() == "show job -o 77\n"
    assert info["JobState"] == "COMPLETING" and info["Reason"] == "TimeLimit" and info["StdOut"] == "/home/alice/o-77.out"


def test_a_failing_missing_or_hanging_scontrol_is_an_empty_answer(tmp_path):
    assert scontrol.show_job("77", scontrol=fake(tmp_path, "echo 'slurm_load_jobs error: Invalid job id' >&2; exit 1")) == {}
    assert scontrol.show_job("77", scontrol=str(tmp_path / "absent")) == {}
    assert scontrol.show_job("77", scontrol=fake(tmp_path, "sleep 30"), timeout=0.5) == {}


def test_the_answer_is_read_bounded_and_any_bytes_decode(tmp_path):
    sc = fake(tmp_path, "printf 'JobId=77 Comment=\\376\\375 '; head -c 3000000 /dev/zero | tr '\\0' 'x'")
    text = scontrol.show_job_text("77", "-o", scontrol=sc)
    # 3 MB printed, MAX_BYTES read: ASCII plus two invalid bytes, each one replacement character
    assert len(text) == scontrol.MAX_BYTES
    assert text.startswith("JobId=77 Comment=\ufffd\ufffd ")


def test_json_form_only_where_slurm_has_a_trustworthy_one(tmp_path):
    doc = {"meta": {"slurm": {"release": "24.11.5"}},
           "jobs": [{"job_id": 77, "name": "train", "job_state": ["TIMEOUT", "COMPLETING"], "state_reason": "TimeLimit",
                     "exit_code": {"return_code": {"number": 0}, "signal": {"id": {"number": 15}}}}]}
    (tmp_path / "new.json").write_text(json.dumps(doc))
    info = scontrol.show_job_json("77", scontrol=fake(tmp_path, f"cat {tmp_path / 'new.json'}"))
    assert info["JobState"] == "TIMEOUT" and info["SlurmRelease"] == "24.11.5"
    doc["meta"]["slurm"]["release"] = "22.05.8"
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert scontrol.show_job_json("77", scontrol=fake(tmp_path, f"cat {tmp_path / 'old.json'}")) == {}
    assert scontrol.show_job_json("77", scontrol=fake(tmp_path, "echo 'JobId=77 JobState=COMPLETING'")) == {}
    assert scontrol.show_job_json("77", scontrol=fake(tmp_path, "echo '{not json'")) == {}


def test_a_saved_answer_reads_like_a_live_one(tmp_path):
    saved = tmp_path / "info"
    saved.write_bytes(LINE.encode() + b" Comment=\xfe\n")
    assert scontrol.read_show_job(str(saved)) == {**scontrol.show_job("77", scontrol=fake(tmp_path, f'echo "{LINE}"')),
                                                  "Comment": "\ufffd"}
    assert scontrol.read_show_job(str(tmp_path / "gone")) is None
