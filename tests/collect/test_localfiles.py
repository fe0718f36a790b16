"""collect/localfiles.py: configured paths and globs per node ($node, $job_id), read as node logs or job output."""

from __future__ import annotations

import gzip
from datetime import datetime, timezone

from attribution.collect.localfiles import collect_files
from attribution.config import FileSourceSettings
from attribution.model import ExecutionContext

from tests.harness.prefilters import AllLines

UTC = timezone.utc
CTX = ExecutionContext(cluster="c", job_id="77", nodes=("gpu1", "gpu2"), start=datetime(2026, 3, 10, tzinfo=UTC),
                       end=datetime(2026, 3, 11, tzinfo=UTC))
XID = "[Tue Mar 10 09:14:37 2026] NVRM: Xid (PCI:0000:9d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _all(source):
    return AllLines()


def test_a_path_per_node_with_rotated_and_compressed_files(tmp_path):
    for node in ("gpu1", "gpu2"):
        (tmp_path / node).mkdir()
    (tmp_path / "gpu1" / "kern.log").write_text(XID + "\n")
    with gzip.open(tmp_path / "gpu1" / "kern.log.1.gz", "wt") as f:
        f.write("[Mon Mar  9 23:00:00 2026] older line\n")
    obs, cov = collect_files([FileSourceSettings(str(tmp_path / "$node" / "kern.log*"), "kernel")], CTX, _all)
    assert [(c.node, c.status, c.file.rsplit("/", 1)[-1]) for c in cov] == [
        ("gpu1", "ok", "kern.log"), ("gpu1", "ok", "kern.log.1.gz"), ("gpu2", "missing", "kern.log*")]
    assert {o.node for o in obs} == {"gpu1"} and {o.source for o in obs} == {"kernel"}
    assert sorted(o.text for o in obs)[0].startswith("NVRM: Xid") and obs[0].time is not None


def test_job_output_files_by_job_id_belong_to_the_node_their_name_starts_with(tmp_path):
    d = tmp_path / "jobs" / "77"
    d.mkdir(parents=True)
    (d / "gpu2-rank8.err").write_text("RuntimeError: boom\n")
    (d / "slurm-77.out").write_text("hello\n")
    obs, cov = collect_files([FileSourceSettings(str(tmp_path / "jobs" / "$job_id" / "*"), "job")], CTX, _all)
    assert sorted((c.file.rsplit("/", 1)[-1], c.node) for c in cov) == [("gpu2-rank8.err", "gpu2"),
                                                                        ("slurm-77.out", None)]
    assert {o.source for o in obs} == {"job"}


def test_a_node_log_that_names_no_node_is_reported_not_read(tmp_path):
    (tmp_path / "shared.log").write_text(XID + "\n")
    (tmp_path / "gpu1.log").write_text(XID + "\n")
    obs, cov = collect_files([FileSourceSettings(str(tmp_path / "*.log"), "node")], CTX, _all)
    assert [(c.file.rsplit("/", 1)[-1], c.status) for c in cov] == [("gpu1.log", "ok"), ("shared.log", "error")]
    assert "which node" in cov[1].reason and [o.node for o in obs] == ["gpu1"]


def test_an_unreadable_or_corrupt_file_is_a_coverage_error(tmp_path):
    (tmp_path / "gpu1").mkdir()
    (tmp_path / "gpu1" / "kern.log.gz").write_bytes(b"not gzip at all")
    _, cov = collect_files([FileSourceSettings(str(tmp_path / "$node" / "kern.log.gz"), "kernel")], CTX, _all)
    assert cov[0].status == "error" and cov[1].status == "missing"
