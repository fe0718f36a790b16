#!/usr/bin/env python3
"""Coverage-guided fuzzing (atheris / libFuzzer) of the collectors and the rule engine.

    python tests/fuzz/fuzz_collect.py [CORPUS_DIR ...] -max_total_time=25 -timeout=10

The first byte of an input picks the target, the rest is the data:
  0  a batch of lines through one kernel line parser (it remembers the last prefix format)
  1  the same through the Fabric Manager line parser
  2  the same through the job-output line parser (srun --label or not) and the traceback tracker
  3  parse_node_log over the raw bytes (kernel, fabricmanager or node source; the shipped pack's prefilter or every
     line), then extract and correlate over the observations
  4  parse_job_output over the raw bytes, then extract and correlate
  5  one observation of any source straight into the rule engine (extract, correlate)
  6  the spool decoder (may only raise SpoolCorrupt)
Anything else raised is a crash: libFuzzer stops, writes the input to crash-<sha1> (see -artifact_prefix) and exits
non-zero. An input that runs longer than -timeout seconds is a crash too (catastrophic backtracking, quadratic loops).
tests/hardening/test_fuzz.py runs this for a bounded time box in CI.
"""

from __future__ import annotations

import io
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.harness
from tests.harness.prefilters import AllLines  # noqa: E402

with atheris.instrument_imports(include=["attribution"]):
    from attribution.node import spool
    from attribution.collect.fabricmanager import FabricManagerLineParser
    from attribution.collect.joblog import JobLineParser, TracebackTracker, looks_labelled
    from attribution.collect.joboutput import parse_job_output
    from attribution.collect.kernel import KernelLineParser
    from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
    from attribution.correlate.rootcause import correlate
    from attribution.extract.events import extract
    from attribution.model import ExecutionContext, Observation
    from attribution.rulepack.load import load_rules
    from attribution.timeparse import resolve_zone

ROOT = Path(__file__).resolve().parents[2]
RULES = load_rules(ROOT / "rules")
UTC = timezone.utc
START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
CONTEXTS = [
    ExecutionContext(cluster="c", job_id="1", nodes=("node1", "node2"), start=START, end=START + timedelta(hours=2),
                     state="FAILED", tasks_per_node=4, boot_time={"node1": START - timedelta(days=1)}),
    ExecutionContext(cluster="c", job_id="2", nodes=("node1",), timezone="Asia/Tokyo", state="CANCELLED"),
    ExecutionContext(cluster="c", job_id="3", nodes=("node1", "node2"), start=START, end=START, timezone="-05:30",
                     state="COMPLETED", srun_tasks_per_node=1),
]
SOURCES = ("kernel", "fabricmanager", "node", "job", "scheduler")


def _lines(fdp: atheris.FuzzedDataProvider) -> list[str]:
    return fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()).split("\n")


def TestOneInput(data: bytes) -> None:  # noqa: N802 (libFuzzer's name)
    if len(data) < 2:
        return
    target, choice, body = data[0] % 7, data[1], data[2:]
    ctx = CONTEXTS[choice % len(CONTEXTS)]
    fdp = atheris.FuzzedDataProvider(body)
    if target == 0:
        p = KernelLineParser(zone=resolve_zone(ctx.timezone), boot_time=ctx.boot_time.get("node1"))
        for line in _lines(fdp):
            p.parse(line)
    elif target == 1:
        p = FabricManagerLineParser(zone=resolve_zone(ctx.timezone))
        for line in _lines(fdp):
            p.parse(line)
    elif target == 2:
        lines = _lines(fdp)
        p = JobLineParser(zone=resolve_zone(ctx.timezone), labelled=bool(choice & 8) or looks_labelled(lines))
        t = TracebackTracker()
        for line in lines:
            jl = p.parse(line)
            t.feed((jl.label, jl.rank, jl.pod), jl)
    elif target == 3:
        source = ("kernel", "fabricmanager", "node")[(choice >> 2) % 3]
        pre = AllLines() if choice & 32 else RULES.prefilter(source)
        obs, stats = parse_node_log(io.BytesIO(body), NodeLogSpec(source, "node1", "x.log"), ctx, pre)
        assert stats.bytes == len(body)
        correlate(RULES, ctx, extract(RULES, ctx, obs))
    elif target == 4:
        pre = AllLines() if choice & 32 else RULES.prefilter("job")
        obs, stats = parse_job_output(io.BytesIO(body), "job/x.out", ctx, pre)
        assert stats.bytes == len(body)
        correlate(RULES, ctx, extract(RULES, ctx, obs))
    elif target == 5:
        text = fdp.ConsumeUnicodeNoSurrogates(len(body))
        obs = Observation(source=SOURCES[(choice >> 2) % len(SOURCES)], node=None, location="x:1", text=text,
                          line=text, host="node2" if choice & 64 else None, rank=choice if choice & 128 else None)
        correlate(RULES, ctx, extract(RULES, ctx, [obs]))
    else:
        try:
            spool.decode(body)
        except spool.SpoolCorrupt:
            pass


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
