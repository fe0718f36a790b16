"""The bundle collector reads whatever it is given: no crash, and every problem shows in the coverage."""

from __future__ import annotations

import os

from attribution.pipeline.diagnose import diagnose_bundle

from tests.harness.logs import write_context

XID79 = "[Tue Mar 10 09:14:37 2026] NVRM: Xid (PCI:0000:9d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
WATCHDOG = ("20: [rank20]:[E310 09:24:36.943220249 ProcessGroupNCCL.cpp:563] [Rank 20] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=58241, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600325 milliseconds before timing out.\n")


def _bundle(tmp_path, kernel: dict[str, bytes], job: bytes = WATCHDOG.encode()):
    b = tmp_path / "b"
    write_context(b, nodes="g[01-02]")
    for node, data in kernel.items():
        p = b / "nodes" / node / "kernel.log"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (b / "job").mkdir()
    (b / "job" / "slurm-1.out").write_bytes(job)
    return b


def _cov(verdict, node, source="kernel"):
    return next(c for c in verdict.coverage if c.node == node and c.source == source)


def test_binary_garbage_around_a_fault_line(ruleset, tmp_path):
    garbage = bytes(range(256)) * 40 + b"\0" * 5000 + os.urandom(20000).replace(b"\n", b"x")
    b = _bundle(tmp_path, {"g01": b"ok line\n", "g02": garbage + b"\n" + XID79.encode() + b"\0\0\0" + garbage})
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.kind == "gpu_fallen_off_bus" and v.root_cause.node == "g02"
    notes = " ".join(_cov(v, "g02").notes)
    assert "NUL bytes" in notes and "invalid UTF-8" in notes


def test_fault_line_glued_to_nul_padding_after_a_crash(ruleset, tmp_path):
    """After a power loss a log often has a run of NUL bytes with the next boot's lines written behind it."""
    b = _bundle(tmp_path, {"g01": b"", "g02": b"[Tue Mar 10 09:00:00 2026] ok\n" + b"\0" * 4096 + XID79.encode()})
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause is not None and v.root_cause.node == "g02"
    assert _cov(v, "g01").status == "empty"


def test_invalid_utf8_in_the_fault_line_itself(ruleset, tmp_path):
    line = XID79.replace("GPU has", "GPU \udcff has").encode("utf-8", "surrogateescape")
    b = _bundle(tmp_path, {"g01": line, "g02": b""})
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.kind == "gpu_fallen_off_bus"
    assert "\ufffd" in v.root_cause.line


def test_a_50_mb_single_line(ruleset, tmp_path):
    huge = b"A" * (50 << 20)
    b = _bundle(tmp_path, {"g01": huge, "g02": XID79.encode()}, job=huge + b"\n" + WATCHDOG.encode())
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.node == "g02"
    assert any("longer than" in n for n in _cov(v, "g01").notes)
    job = next(c for c in v.coverage if c.source == "job")
    assert job.lines == 2 and any("longer than" in n for n in job.notes)
    assert any(s.event.kind == "nccl_watchdog_timeout" for s in v.symptoms)


def test_truncated_last_line(ruleset, tmp_path):
    b = _bundle(tmp_path, {"g01": b"", "g02": XID79.encode().rstrip(b"\n")})
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.kind == "gpu_fallen_off_bus"
    assert any("no newline" in n for n in _cov(v, "g02").notes)


def test_missing_node_folder(ruleset, tmp_path):
    b = _bundle(tmp_path, {"g02": XID79.encode()})
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.node == "g02"
    cov = _cov(v, "g01")
    assert cov.status == "missing" and "nodes/g01" in cov.reason


def test_unreadable_file(ruleset, tmp_path):
    """A kernel.log that cannot be read (here a directory: root can read any file) is an error, not a crash."""
    b = _bundle(tmp_path, {"g02": XID79.encode()})
    (b / "nodes" / "g01" / "kernel.log").mkdir(parents=True)
    dangling = b / "nodes" / "g02" / "fabricmanager.log"
    dangling.symlink_to(tmp_path / "nowhere")
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.node == "g02"
    assert _cov(v, "g01").status == "error"
    assert "cannot read" in _cov(v, "g01").reason
    assert _cov(v, "g02", "fabricmanager").status == "missing"


def test_out_of_order_timestamps(ruleset, tmp_path):
    lines = (XID79 +
             "[Tue Mar 10 09:10:00 2026] NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, "
             "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4\n")
    b = _bundle(tmp_path, {"g01": b"", "g02": lines.encode()})
    v = diagnose_bundle(ruleset, b).verdict
    # The earlier event wins whatever its position in the file.
    assert v.root_cause.kind == "gpu_ecc_dbe"
    assert any("backwards" in n for n in _cov(v, "g02").notes)


def test_unreadable_job_file_and_no_job_folder(ruleset, tmp_path):
    b = _bundle(tmp_path, {"g01": b"", "g02": XID79.encode()})
    (b / "job" / "slurm-1.out").unlink()
    (b / "job").rmdir()
    v = diagnose_bundle(ruleset, b).verdict
    assert v.root_cause.node == "g02"
    assert any(c.source == "job" and c.status == "missing" for c in v.coverage)
