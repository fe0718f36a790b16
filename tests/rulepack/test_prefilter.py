"""The line prefilter: Hyperscan and RE2 select the same lines, and every line a rule matches is selected."""

from __future__ import annotations

import pytest

from attribution.collect.textio import line_bounds
from attribution.rulepack.prefilter import Prefilter

from tests.conftest import CASES, INCIDENTS, bundles


def _lines(block: bytes, offsets: list[int]) -> set[int]:
    return {line_bounds(block, o)[0] for o in offsets}


def _sources(ruleset) -> list[str]:
    return sorted({s for r in ruleset.rules for s in r.sources})


def test_hyperscan_is_the_engine_here(ruleset):
    """On x86-64 Linux (this machine, CI) the fast engine is the one in use, not the fallback."""
    pf = ruleset.prefilter("job")
    pf.find(b"warm-up\n")
    assert pf._hs is not None


def test_warming_a_pack_compiles_every_prefilter_before_its_first_search():
    """The service's workers warm their rule pack at start: every source's prefilter and the error-looking filter
    hold their Hyperscan database before any line is searched, and select what they selected unwarmed."""
    from attribution.rulepack.load import load_rules

    cold, warm = load_rules(), load_rules()
    filters = [*warm._prefilters.values(), warm.errorlike]
    assert filters and not any(pf._hs_tried for pf in filters)
    warm.warm()
    assert all(pf._hs_tried and pf._hs is not None for pf in filters)
    block = _examples_block(cold, "kernel")
    assert warm.prefilter("kernel").find(block) == cold.prefilter("kernel").find(block) != []


def _examples_block(ruleset, source: str) -> bytes:
    lines = []
    for r in ruleset.rules_for(source):
        lines += [ex.line for ex in r.examples] + list(r.no_match)
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("source", ["job", "kernel", "fabricmanager", "node", "scheduler"])
def test_both_engines_select_the_same_lines_of_the_rule_examples(ruleset, source):
    pf = ruleset.prefilter(source)
    block = _examples_block(ruleset, source)
    _same_or_spanning(pf, block, source)


def _same_or_spanning(pf, block: bytes, what) -> None:
    """Hyperscan only skips windows without a match: the lines are RE2's exactly."""
    assert _lines(block, pf.find(block)) == _lines(block, pf.find_re2(block)), what


@pytest.mark.parametrize("source", ["job", "kernel", "fabricmanager", "node", "scheduler"])
def test_every_example_a_rule_matches_is_selected(ruleset, source):
    """For a multi-line record (a traceback, the three-line 'fallen off the bus') some line of it is selected:
    the collector walks to the record's other lines from there."""
    pf = ruleset.prefilter(source)
    for r in ruleset.rules_for(source):
        for ex in r.examples:
            block = b"noise before\n" + ex.line.encode() + b"\nnoise after\n"
            first = len(b"noise before\n")
            record = range(first, first + len(ex.line.encode()))
            assert any(s in record for s in _lines(block, pf.find(block))), (r.id, ex.line)


def test_both_engines_select_the_same_lines_of_every_example_bundle(ruleset):
    checked = 0
    for b in bundles(INCIDENTS) + bundles(CASES):
        for path in sorted(b.rglob("*.log")) + sorted(b.rglob("*.out")) + sorted(b.rglob("*.err")):
            source = "job" if "job" in path.parts else ("fabricmanager" if "fabric" in path.name else "kernel")
            pf = ruleset.prefilter(source)
            block = path.read_bytes()
            _same_or_spanning(pf, block, path)
            checked += 1
    assert checked > 60


def test_a_pattern_hyperscan_refuses_falls_back_to_re2():
    pf = Prefilter([r"\p{Greek}+", "plain"])  # RE2 accepts Unicode scripts, Hyperscan (bytes mode) does not
    assert pf.find("a plain line, λόγος\n".encode()) == [2]  # one offset per line
    assert pf._hs is None


def test_a_match_running_past_its_line_does_not_hide_the_next_line():
    """`:\\s*(.*)$` matches past the newline; the next line's own match must still be found."""
    pf = Prefilter([r"[A-Za-z]+Error(?::\s*(?:.*))?$", r"\bChildFailedError\b"])
    block = b"x\nValueError:\nChildFailedError happened\ny\n"
    assert _lines(block, pf.find(block)) == _lines(block, pf.find_re2(block)) == {2, 14}


def test_windows_are_cut_at_line_ends(ruleset):
    """A match on a line that straddles a window boundary is found, and a long hostile line costs one RE2
    search, not a callback per byte."""
    pf = ruleset.prefilter("job")
    filler = b"step 1 loss 2.0\n" * (Prefilter.WINDOW // 16 - 1)
    line = b"RuntimeError: CUDA error: an illegal memory access was encountered" + b"\t" * (1 << 20)
    block = filler + b"xxxx" + line + b"\n" + filler
    assert _lines(block, pf.find(block)) == {len(filler)}


def test_a_prefilter_never_selects_a_line_its_unless_patterns_match():
    """The error-looking filter's informational levels: a line an `unless` pattern matches is not selected,
    with Hyperscan and with RE2, and the filter extended with a collector's structural patterns keeps them."""
    pf = Prefilter([r"(?i:\bfail(ed|ure)?\b)"], unless=[r"\bNCCL INFO\b"])
    block = (b"node1:1:2 [0] NCCL INFO Failed to open libibverbs.so[.1]\n"
             b"node1:1:2 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'\n"
             b"step 3 ok\n")
    warn = block.index(b"node1:1:2 [0] transport")
    assert _lines(block, pf.find(block)) == {warn}
    assert pf._hs is not None  # the Hyperscan path ran (test_hyperscan_is_the_engine_here)
    tb = block + b"Traceback (most recent call last):\n"
    assert _lines(tb, pf.extended([r"^Traceback"]).find(tb)) == {warn, len(block)}
    assert _lines(block, Prefilter([r"(?i:\bfail(ed|ure)?\b)"]).find(block)) == {0, warn}  # without `unless`


def test_the_cached_pack_keeps_the_error_looking_filters_informational_levels(tmp_path):
    from attribution.rulepack import cache

    from tests.conftest import ROOT

    info = (b"gpu1:5:6 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: "
            b"cannot open shared object file\n")
    warn = b"gpu1:5:6 [0] misc/socket.cc:49 NCCL WARN socketProgress: failed\n"
    cache.cached_rules(ROOT / "rules", tmp_path / "c")  # a miss: loads and writes
    cached = cache.cached_rules(ROOT / "rules", tmp_path / "c")  # read back from the pickle
    assert cached.errorlike.unless is not None
    assert cached.errorlike.find(info) == []
    assert _lines(warn, cached.errorlike.find(warn)) == {0}


def test_threads_scanning_with_one_prefilter_at_once_each_get_every_hit(ruleset):
    """The service parses reports in several threads with the pack's one prefilter per source: Hyperscan's scratch
    space is per scan, so each thread has its own (a shared one fails with ScratchInUseError)."""
    from concurrent.futures import ThreadPoolExecutor

    pf = ruleset.prefilter("kernel")
    line = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n"
    block = (b"usb 1-1: quiet\n" * 200 + line) * 200
    want = pf.find(block)
    assert len(want) == 200
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: pf.find(block), range(64)))
    assert all(g == want for g in got)
