"""Invariants of the whole pipeline (attribution/pipeline.py): order-independence, determinism, healthy jobs,
a needle in a million lines of noise."""

from __future__ import annotations

import random
import shutil

import pytest

from attribution.collect.bundle import collect_bundle
from attribution.pipeline.diagnose import diagnose_bundle, diagnose_observations
from attribution.reports.render import verdict_to_dict
from attribution.scope.bundle import load_context

from tests.conftest import INCIDENTS
from tests.harness.logs import utc, write_context, write_kernel_log


def _json(ruleset, bundle):
    return verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)


def test_same_bundle_twice_gives_the_same_verdict(ruleset):
    for b in sorted(INCIDENTS.iterdir()):
        if (b / "context.yaml").is_file():
            assert _json(ruleset, b) == _json(ruleset, b)


def test_verdict_does_not_depend_on_the_order_of_observations(ruleset):
    rng = random.Random(7)
    for b in sorted(INCIDENTS.iterdir()):
        if not (b / "context.yaml").is_file():
            continue
        ctx = load_context(b / "context.yaml")
        obs, cov = collect_bundle(b, ctx, ruleset.prefilter)
        base = verdict_to_dict(diagnose_observations(ruleset, ctx, obs, cov).verdict)
        for _ in range(3):
            shuffled = list(obs)
            rng.shuffle(shuffled)
            cov_shuffled = list(cov)
            rng.shuffle(cov_shuffled)
            v = verdict_to_dict(diagnose_observations(ruleset, ctx, shuffled, cov_shuffled).verdict)
            assert v == base, b.name


def test_verdict_does_not_depend_on_file_names_or_order(ruleset, tmp_path):
    """Renaming and splitting job output files changes nothing but locations."""
    src = INCIDENTS / "04-xid74-nvlink"
    dst = tmp_path / "b"
    shutil.copytree(src, dst)
    job = next((dst / "job").iterdir())
    lines = job.read_text().splitlines(keepends=True)
    job.unlink()
    half = len(lines) // 2
    (dst / "job" / "zz-second.log").write_text("".join(lines[half:]))
    (dst / "job" / "aa-first.log").write_text("".join(lines[:half]))
    a = _json(ruleset, src)
    b = _json(ruleset, dst)
    for key in ("outcome", "confidence", "action", "culprits"):
        assert a[key] == b[key]
    assert (a["root_cause"]["kind"], a["root_cause"]["node"], a["root_cause"]["line"]) == \
           (b["root_cause"]["kind"], b["root_cause"]["node"], b["root_cause"]["line"])
    assert a["symptoms_total"] == b["symptoms_total"]


def test_healthy_completed_job_yields_none_and_no_cause(ruleset, tmp_path):
    b = tmp_path / "healthy"
    write_context(b, state="COMPLETED", exit_code="0:0", nodes="g[01-02]")
    for i, n in enumerate(("g01", "g02")):
        write_kernel_log(b / "nodes" / n / "kernel.log", utc("2026-03-10T07:00:00Z"), 4 * 3600, 3000, seed=i)
    (b / "job").mkdir()
    (b / "job" / "slurm-1.out").write_text("".join(
        f"{r:2d}: [2026-03-10 08:{r:02d}:00,000][train][INFO] step {r} loss 1.0\n" for r in range(16)))
    d = diagnose_bundle(ruleset, b)
    assert d.verdict.outcome == "none"
    assert d.verdict.root_cause is None and d.verdict.culprits == ()
    assert [e for e in d.events if e.role == "cause"] == []


@pytest.mark.slow
def test_one_xid79_in_a_million_lines_of_noise(ruleset, tmp_path):
    b = tmp_path / "needle"
    write_context(b, nodes="g[01-02]", start="2026-03-10T08:00:00Z", end="2026-03-10T10:00:00Z")
    write_kernel_log(b / "nodes" / "g01" / "kernel.log", utc("2026-03-10T06:00:00Z"), 5 * 3600, 10_000, seed=3)
    write_kernel_log(b / "nodes" / "g02" / "kernel.log", utc("2026-03-10T06:00:00Z"), 5 * 3600, 1_000_000,
                     seed=4, inserts={700_000: "NVRM: Xid (PCI:0000:9d:00): 79, pid='<unknown>', name=<unknown>, "
                                               "GPU has fallen off the bus."})
    (b / "job").mkdir()
    (b / "job" / "out.log").write_text(
        "12: [rank12]:[E310 09:45:00.000000000 ProcessGroupNCCL.cpp:563] [Rank 12] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600325 milliseconds before timing out.\n")
    v = diagnose_bundle(ruleset, b).verdict
    assert v.outcome == "gpu_hardware"
    assert v.root_cause.kind == "gpu_fallen_off_bus" and v.root_cause.node == "g02"
    assert v.root_cause.gpu == "0000:9d:00"
    assert v.root_cause.location == "nodes/g02/kernel.log:700001"
    assert [(c.node, c.lines) for c in v.coverage if c.source == "kernel"] == [("g01", 10_000), ("g02", 1_000_000)]
    assert v.symptoms[0].explained_by == "root_cause"
