"""No regex can be made to backtrack: rule patterns are RE2 (linear time), `rules check` refuses what RE2 cannot run,
the collectors' own prefix regexes stay linear on hostile lines, and a hostile 1 MB line costs bounded time
through the whole diagnose path (collect, prefilter, decode, prefix parsing, rule matching, correlation).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import re2

from attribution.collect.fabricmanager import FabricManagerLineParser
from attribution.collect.joblog import JobLineParser
from attribution.collect.kernel import KernelLineParser
from attribution.collect.textio import MAX_RECORD_CHARS
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.rulecheck import check_pack
from attribution.rulepack.prefilter import compile_re2

from tests.conftest import ROOT

RE2_TYPE = type(compile_re2("x"))

HOSTILE_RULE = """type: rules
rules:
  - id: kernel.hostile_probe
    source: kernel
    kind: gpu_fallen_off_bus
    pattern: '{pattern}'
    examples:
      match:
        - line: '[    1.000000] NVRM: probe aaa aaa'
      no_match:
        - '[    1.000000] NVRM: nothing'
"""

BACKTRACKING = {
    "backreference": r"NVRM: probe (\w+) \1",
    "named backreference": r"NVRM: probe (?P<w>\w+) (?P=w)",
    "lookahead": r"NVRM: probe (?=aaa)\w+",
    "negative lookbehind": r"(?<!x)NVRM: probe",
    "atomic group": r"NVRM: probe (?>a+) aaa",
    "possessive quantifier": r"NVRM: probe a++ aaa",
}


def _pack_with(tmp_path: Path, pattern: str) -> Path:
    pack = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", pack)
    (pack / "zz-hostile.yaml").write_text(HOSTILE_RULE.format(pattern=pattern.replace("'", "''")))
    return pack


def test_every_pattern_of_the_pack_runs_on_re2(ruleset):
    compiled = []
    for r in ruleset.rules:
        compiled.append(r.regex)
    for cat in ruleset.catalogs.values():
        for e in list(cat.entries.values()) + ([cat.default] if cat.default else []):
            compiled += [rx for _, rx in e.fields]
            compiled += [rx for v in e.variants for _, rx in v.when]
    for source in {s for r in ruleset.rules for s in r.sources}:
        compiled.append(ruleset.prefilter(source)._rx)
    assert compiled and all(isinstance(rx, RE2_TYPE) for rx in compiled)


@pytest.mark.parametrize("name", sorted(BACKTRACKING))
def test_rules_check_refuses_a_backtracking_construct(tmp_path, name):
    problems, _ = check_pack(_pack_with(tmp_path, BACKTRACKING[name]))
    assert any(p.path.endswith("zz-hostile.yaml") and p.line and "rejected by RE2 (linear-time engine)" in p.message
               for p in problems), problems


def test_rules_check_command_exits_1_with_the_location(tmp_path):
    pack = _pack_with(tmp_path, BACKTRACKING["backreference"])
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "rules", "check", str(pack)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert f"{pack / 'zz-hostile.yaml'}:6: pattern rejected by RE2" in out and "RE2" in out and "Traceback" not in out


CLASSIC = [r"(a+)+$", r"(a|aa)+$", r"(a|a?)+b", r"(.*a){12}x", r"^(\w+\s?)*$", r"(x+x+)+y", r"([a-z]+:)+z"]


@pytest.mark.parametrize("pattern", CLASSIC)
def test_classic_catastrophic_patterns_are_linear_under_re2(pattern):
    """Patterns that take exponential time in a backtracking engine are accepted by RE2 and stay linear."""
    rx = compile_re2(pattern)
    for n in (1_000_000,):
        subject = "a" * n + "!"
        t0 = time.perf_counter()
        rx.search(subject)
        rx.search("x" * n)
        rx.search("abc:" * (n // 4))
        assert time.perf_counter() - t0 < 2.0


def test_a_catastrophic_pattern_in_a_rule_costs_linear_time_on_the_whole_path(tmp_path):
    """`(a+)+$`-style rules pass `rules check` (RE2 runs them in linear time) and a 1 MB line does not hang."""
    from attribution.rulepack.load import load_rules

    pack = _pack_with(tmp_path, r"NVRM: probe (a+)+$")
    rs = load_rules(pack)
    bundle = _bundle(tmp_path / "b", kernel=[b"[    1.000000] NVRM: probe " + b"a" * 1_000_000 + b"!"])
    t0 = time.perf_counter()
    diagnose_bundle(rs, bundle)
    assert time.perf_counter() - t0 < 10


# -- the collectors' own regexes (Python re, not RE2) on hostile lines ------------------------------------------

TOKENS = ["[PG ", "[", "]", " ", ":", ": ", "a: ", "(((", ")))", "\t", "0", "0:", "0,", "[Rank ", "Rank 1", "PG ",
          "-", "+", ".", "0.", "[0.0]", "kernel: ", "a:1:1 ", "[E", "E0101 ", "T", "[pod/", "P1 ", "\\", "\x1b["]
PREFIXES = ["", "[    5.123456] ", "[Mon Nov 30 08:00:00 2026] ", "Nov 30 08:00:00 node1 kernel: ",
            "2026-11-30T08:00:00+00:00 node1 kernel: ", "6,1,5,-;", "kern  :err   : 2026-11-30T08:00:00,1+00:00 ",
            "node1: kern: warning: [", "[Nov 30 2026 08:00:00] [ERROR] [tid 1] ", " 3: [rank3]: ", "[pod/p/c] ",
            "2026-11-30T08:00:00Z ", "node1:1:1 [0] NCCL WARN "]


def _hostile_lines():
    for prefix in PREFIXES:
        for tok in TOKENS:
            yield prefix + tok * ((MAX_RECORD_CHARS - len(prefix)) // len(tok))


def test_prefix_parsers_stay_linear_on_hostile_lines():
    """Every line as long as the decoder hands over (64 KiB) parses in well under a second, whatever it repeats.
    (A quadratic regex once took 10 s per line here: `[PG ` repeated, in the job-output rank pattern.)"""
    parsers = [KernelLineParser().parse, FabricManagerLineParser().parse, JobLineParser().parse,
               JobLineParser(labelled=True).parse]
    worst = (0.0, "")
    for line in _hostile_lines():
        for parse in parsers:
            t0 = time.perf_counter()
            parse(line)
            dt = time.perf_counter() - t0
            worst = max(worst, (dt, line[:40]))
    print(f"\nslowest hostile 64 KiB line: {worst[0] * 1000:.1f} ms ({worst[1]!r}...)")
    assert worst[0] < 0.25, worst


# -- a hostile 1 MB line, end to end ----------------------------------------------------------------------------

MB = 1_000_000
GOOD_XID = (b"[Mon Nov 30 08:30:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, "
            b"GPU has fallen off the bus.")


def _bundle(path: Path, kernel: list[bytes], fm: list[bytes] = (), job: list[bytes] = ()) -> Path:
    (path / "nodes" / "n1").mkdir(parents=True)
    (path / "nodes" / "n2").mkdir(parents=True)
    (path / "job").mkdir()
    (path / "context.yaml").write_text(
        "cluster: c\njob_id: '7'\nnodes: n[1-2]\nstate: FAILED\nexit_code: '1:0'\ntasks_per_node: 4\n"
        "start: 2026-11-30T08:00:00Z\nend: 2026-11-30T09:00:00Z\n")
    (path / "nodes" / "n1" / "kernel.log").write_bytes(b"\n".join(kernel) + b"\n")
    (path / "nodes" / "n2" / "kernel.log").write_bytes(b"\n".join(kernel[:2]) + b"\n")
    (path / "nodes" / "n1" / "fabricmanager.log").write_bytes(b"\n".join(fm) + b"\n")
    (path / "job" / "slurm-7.out").write_bytes(b"\n".join(job) + b"\n")
    return path


HOSTILE_KERNEL = [
    b"NVRM: Xid (" + b"a" * MB,
    b"[Mon Nov 30 08:10:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, " + b"(((" * (MB // 3),
    b"[Mon Nov 30 08:11:00 2026] NVRM: Xid " + b" " * MB,
    b"[Mon Nov 30 08:12:00 2026] NVRM: Xid (" + b":" * MB,
    b"Nov 30 08:13:00 n1 kernel: NVRM: Xid (PCI:" + b"0000:" * (MB // 5),
    b"[    1.000000] " + b"[" * MB + b" NVRM: Xid",
    b"NVRM: Xid (PCI:0000:3b:00): " + b"9" * MB,
    GOOD_XID,
    b"mlx5_core " + b"Link DOWN " * (MB // 10),
    b"\x1b[31m" * (MB // 5) + b"NVRM: Xid",
    b"\xff\xfe" * (MB // 2) + b" NVRM: Xid (",
]
HOSTILE_FM = [
    b"[Nov 30 2026 08:20:00] [ERROR] [tid 1] " + b"(" * MB,
    b"[Nov 30 2026 08:21:00] [ERROR] [tid 1] detected NVSwitch fatal error " + b"2" * MB,
]
HOSTILE_JOB = [
    b"node1:1:1 [0] NCCL WARN " + b"[PG " * (MB // 4),
    b"Traceback (most recent call last):" + b" " * MB,
    b" 3: [rank3]: " + b":" * MB,
    b"[rank1]: Watchdog caught collective operation timeout" + b"[Rank " * (MB // 6),
    b"RuntimeError: CUDA error: " + b"\t" * MB,
]


def test_a_hostile_1mb_line_costs_bounded_time_through_diagnose(ruleset, tmp_path):
    bundle = _bundle(tmp_path / "hostile", HOSTILE_KERNEL, HOSTILE_FM, HOSTILE_JOB)
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    t0 = time.perf_counter()
    d = diagnose_bundle(ruleset, bundle)
    hostile = time.perf_counter() - t0
    benign = _bundle(tmp_path / "benign", [b"[Mon Nov 30 08:10:00 2026] usb 1-1: new device " + b"x" * MB] * 8
                     + [GOOD_XID], [b"[Nov 30 2026 08:20:00] [INFO] [tid 1] " + b"x" * MB] * 2,
                     [b"step 1 loss " + b"2" * MB] * 5)
    t0 = time.perf_counter()
    diagnose_bundle(ruleset, benign)
    quiet = time.perf_counter() - t0
    print(f"\nhostile bundle: {size / MB:.1f} MB in {len(HOSTILE_KERNEL) + len(HOSTILE_FM) + len(HOSTILE_JOB)} "
          f"lines of ~1 MB: diagnose {hostile:.2f} s (benign lines of the same size: {quiet:.2f} s)")
    assert hostile < 20, hostile
    assert d.verdict.outcome == "gpu_hardware" and d.verdict.root_cause.node == "n1"


@pytest.mark.slow
def test_the_same_hostile_lines_through_the_cli(tmp_path):
    """The command an on-call engineer runs: exit 0, no traceback, bounded time (process start included)."""
    bundle = _bundle(tmp_path / "hostile", HOSTILE_KERNEL, HOSTILE_FM, HOSTILE_JOB)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "attribution.cli", "diagnose", str(bundle)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    dt = time.perf_counter() - t0
    print(f"\nattribution diagnose on the hostile bundle: {dt:.2f} s")
    assert r.returncode == 0 and "gpu_hardware" in r.stdout and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert dt < 30


def test_re2_module_is_the_linear_engine():
    assert re2.compile is not None and RE2_TYPE.__module__ == "re2"


# -- many events: correlation time --------------------------------------------------------------------------------


def _storm(n: int):
    from datetime import datetime, timedelta, timezone

    from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
    from attribution.model import ExecutionContext

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ctx = ExecutionContext(cluster="c", job_id="1", nodes=("n1", "n2"), start=start, end=start + timedelta(hours=1),
                           state="FAILED", tasks_per_node=8)
    lines = []
    for i in range(n):
        t = start + timedelta(seconds=60 + i // 100)
        lines.append(f"[{t.strftime('%a %b %e %H:%M:%S %Y')}] NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, "
                     f"name=python3, Graphics SM Warp Exception on (GPC 1, TPC 1, SM 1): MMU Fault")
    import io

    from attribution.rulepack.load import load_rules

    rs = load_rules(ROOT / "rules")
    obs, _ = parse_node_log(io.BytesIO(("\n".join(lines) + "\n").encode()), NodeLogSpec("kernel", "n1", "k"), ctx,
                            rs.prefilter("kernel"))
    return rs, ctx, obs


def _diagnose_counting(monkeypatch, n: int):
    from attribution.correlate import explains
    from attribution.pipeline.diagnose import diagnose_observations

    calls = 0
    real = explains.Relation.explains

    def counting(*args):
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(explains.Relation, "explains", counting)
    rs, ctx, obs = _storm(n)
    d = diagnose_observations(rs, ctx, obs, [])
    return d, calls


def test_an_xid_storm_costs_work_linear_in_its_length(monkeypatch):
    """Counted, not timed (the time is in bench/): 4000 Xid 13 lines cost at most ~4x the pair tests of 1000,
    where comparing every event with every cause would cost 16x (and ~10 s, past a hook's budget)."""
    small, small_calls = _diagnose_counting(monkeypatch, 1000)
    large, large_calls = _diagnose_counting(monkeypatch, 4000)
    assert len(large.events) == 4000 and large.verdict.root_cause.code == 13
    assert large.verdict.root_cause == small.verdict.root_cause  # the first line of the storm
    assert large_calls <= 5 * max(small_calls, 1), (small_calls, large_calls)
