"""A fault of ours while the epilog reads or extracts (a reader's or a rule's bug on some input nobody foresaw)
loses nothing: the job's report still goes out, to the store or the spool, with a coverage row that says which
source could not be read and why (node/epilog.py fault_coverage)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timezone

from attribution.config import Settings
from attribution.node import epilog, spool
from attribution.scope.slurm import parse_env

UTC = timezone.utc
START = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
END = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
ENV = {"SLURM_JOB_ID": "777", "SLURM_NODELIST": "g01", "SLURM_JOB_EXIT_CODE": "256", "SLURM_CLUSTER_NAME": "test",
       "SLURM_JOB_USER": "alice", "SLURM_JOB_START_TIME": str(int(START.timestamp())),
       "SLURM_JOB_END_TIME": str(int(END.timestamp()))}


def _away():
    raise OSError("database away")


def _spooled(settings: Settings) -> dict:
    [f] = spool.pending(settings.spool)
    return spool.decode(f.read_bytes())


def test_a_node_reader_that_raises_still_spools_the_job_with_the_gap(ruleset, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("reader bug")

    monkeypatch.setattr(epilog, "collect_node", broken)
    settings = replace(Settings(home=tmp_path / "home"))
    env = parse_env(dict(ENV, SLURMD_NODENAME="g01", SLURM_SCRIPT_CONTEXT="epilog_slurmd"))
    r = epilog.run_node(ruleset, settings, env, _away, time.monotonic() + 30, now=END)
    assert r.spooled is not None and not r.stored, r.line()
    doc = _spooled(settings)
    assert doc["context"]["job_id"] == "777" and doc["events"] == []
    assert [(c["source"], c["node"], c["status"], c["reason"]) for c in doc["coverage"]] == [
        ("kernel", "g01", "error", "collection failed: RuntimeError: reader bug")]


def test_a_job_output_reader_that_raises_still_spools_the_controllers_report(ruleset, tmp_path, monkeypatch):
    import attribution.collect.joboutput as joboutput

    def broken(*args, **kwargs):
        raise UnicodeError("parser bug")

    monkeypatch.setattr(joboutput, "read_job_output", broken)
    out = tmp_path / "slurm-777.out"
    out.write_text("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access\n")
    info = {"JobState": "FAILED", "ExitCode": "1:0", "StdOut": str(out), "StdErr": str(out),
            "StartTime": "2026-03-10T08:00:00", "EndTime": "2026-03-10T10:00:00", "NodeList": "g01"}
    settings = replace(Settings(home=tmp_path / "home"))
    env = parse_env(dict(ENV, SLURM_SCRIPT_CONTEXT="epilog_slurmctld", SLURM_JOB_EXIT_CODE2="1:0"))
    r = epilog.run_controller(ruleset, settings, env, _away, time.monotonic() + 30, info=info, now=END)
    assert r.spooled is not None and not r.stored, r.line()
    doc = _spooled(settings)
    assert doc["context"]["job_id"] == "777" and doc["context"]["state"] == "FAILED"
    assert [(c["source"], c["status"], c["reason"], c.get("file")) for c in doc["coverage"]] == [
        ("job", "error", "collection failed: UnicodeError: parser bug", str(out))]
