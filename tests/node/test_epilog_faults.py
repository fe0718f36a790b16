"""A fault of ours while a hook reads (a reader's or a parser's bug on some input nobody foresaw) loses nothing: the
job's report still goes out, to the service or the spool, with a coverage row that says which source could not be
read and why. On the node, the collector's readers (node/agent.py); on the controller, the job output's reader
(pipeline/controller.py)."""

from __future__ import annotations

import socket

from attribution.node import agent, spool
from attribution.node import logs as nodelogs

ENV = {"SLURM_JOB_ID": "777", "SLURM_NODELIST": "g01", "SLURM_JOB_EXIT_CODE": "256", "SLURM_CLUSTER_NAME": "test",
       "SLURM_JOB_USER": "alice", "SLURM_JOB_START_TIME": "1773129600", "SLURM_JOB_END_TIME": "1773136800"}


def _away() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_node_reader_that_raises_still_spools_the_job_with_the_gap(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("reader bug")

    monkeypatch.setattr(nodelogs, "read_kernel", broken)
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    environ = dict(ENV, SLURMD_NODENAME="g01", SLURM_SCRIPT_CONTEXT="epilog_slurmd",
                   ATTRIBUTION_SPOOL_DIR=str(tmp_path / "spool"), ATTRIBUTION_STATE_DIR=str(tmp_path / "state"),
                   ATTRIBUTION_SERVICE_URL=_away(), ATTRIBUTION_SERVICE_TOKEN_FILE=str(token),
                   ATTRIBUTION_HOOK_ENV=str(tmp_path / "none.env"), ATTRIBUTION_FM_LOG=str(tmp_path / "no-fm"))
    lines = []
    agent.run_epilog(budget=5, environ=environ, out=type("O", (), {"write": lambda self, t: lines.append(t),
                                                                    "flush": lambda self: None})())
    assert "spooled to" in "".join(lines), lines
    [f] = spool.pending(tmp_path / "spool")
    doc = spool.decode(f.read_bytes())
    assert doc["slurm"]["SLURM_JOB_ID"] == "777"
    assert [(log["source"], log["status"], log["reason"]) for log in doc["logs"]] == [
        ("kernel", "error", "collection failed: RuntimeError: reader bug"), ("fabricmanager", "missing", "no file")]


def test_a_job_output_reader_that_raises_still_reports_the_controllers_view(ruleset, tmp_path, monkeypatch):
    import attribution.collect.joboutput as joboutput
    from attribution.config import Settings
    from attribution.pipeline.controller import controller_document
    from attribution.pipeline.intake import controller_piece, decode_document

    def broken(*args, **kwargs):
        raise UnicodeError("parser bug")

    monkeypatch.setattr(joboutput, "read_job_output", broken)
    out = tmp_path / "slurm-777.out"
    out.write_text("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access\n")
    info = {"JobState": "FAILED", "ExitCode": "1:0", "StdOut": str(out), "StdErr": str(out),
            "StartTime": "2026-03-10T08:00:00", "EndTime": "2026-03-10T10:00:00", "NodeList": "g01"}
    env = dict(ENV, SLURM_SCRIPT_CONTEXT="epilog_slurmctld", SLURM_JOB_EXIT_CODE2="1:0")
    doc, skipped = controller_document(ruleset, Settings(home=tmp_path / "home"), env, info)
    assert skipped is None
    piece = controller_piece(ruleset, decode_document(doc))
    assert piece.context.job_id == "777" and piece.context.state == "FAILED"
    assert [(c.source, c.status, c.reason, c.file) for c in piece.coverage] == [
        ("job", "error", "collection failed: UnicodeError: parser bug", str(out))]
