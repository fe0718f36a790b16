"""The coverage-guided fuzz run (tests/fuzz/fuzz_collect.py, atheris) over the collectors and the rule engine finds
no crash and no input slower than its per-input timeout within its time box.

The seed corpus is every rule's example and near-miss lines and the head of every example bundle's logs, one seed
per fuzz target; the dictionary holds the tokens of the log prefixes. Set ATTRIBUTION_FUZZ_SECONDS for a longer run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CASES, INCIDENTS, ROOT, bundles

pytestmark = pytest.mark.slow  # a coverage-guided fuzz run for a fixed time box


FUZZER = ROOT / "tests" / "fuzz" / "fuzz_collect.py"
TIME_BOX = int(os.environ.get("ATTRIBUTION_FUZZ_SECONDS", "20"))
PER_INPUT_TIMEOUT = 10
TOKENS = ["NVRM: Xid (PCI:", "): ", "SXid (PCI:", "NCCL WARN ", "[rank", "]: ", "Rank ", "[PG ID 0 ", "kernel: ",
          "Traceback (most recent call last):", "[ERROR] [tid ", "-- Boot ", "6,1,2,-;", "[    1.000000] ",
          "[Mon Nov 30 08:00:00 2026] ", "Nov 30 08:00:00 node1 ", "2026-11-30T08:00:00.1+00:00 ", "kern  :err   : ",
          "node1: kern: warning: [", "[Nov 30 2026 08:00:00] ", "node1:1:2 [0] ", " 3: ", "[pod/p/c] ", "E1130 ",
          "Watchdog caught collective operation timeout", "CUDA error: ", "Link DOWN", "attribution-spool/1 "]


def _seeds(corpus: Path, ruleset) -> int:
    n = 0

    def put(target: int, choice: int, data: bytes) -> None:
        nonlocal n
        (corpus / f"seed-{n:05d}").write_bytes(bytes([target, choice]) + data[:4096])
        n += 1

    for r in ruleset.rules:
        for line in [ex.line for ex in r.examples] + list(r.no_match):
            b = line.encode()
            target = {"kernel": 0, "node": 0, "fabricmanager": 1, "job": 2}.get(r.source, 5)
            put(target, 0, b)
            put(3 if r.source != "job" else 4, 0, b + b"\n")
            put(5, {"kernel": 0, "fabricmanager": 4, "node": 8, "job": 12, "scheduler": 16}.get(r.source, 0), b)
    for b in bundles(INCIDENTS) + bundles(CASES):
        for log in sorted(b.glob("nodes/*/*.log"))[:2]:
            put(3, 4 if log.name == "fabricmanager.log" else 0, log.read_bytes()[-4096:])
        for out in sorted((b / "job").glob("*"))[:1]:
            put(4, 0, out.read_bytes()[-4096:])
    put(6, 0, b"attribution-spool/1 " + b"0" * 64 + b" 2\n{}")
    return n


def test_fuzz_the_collectors_and_the_rule_engine(tmp_path, ruleset):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = _seeds(corpus, ruleset)
    dictionary = tmp_path / "tokens.dict"
    dictionary.write_text("".join(f"{json.dumps(t)}\n" for t in TOKENS))
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    r = subprocess.run(
        [sys.executable, str(FUZZER), str(corpus), f"-max_total_time={TIME_BOX}", f"-timeout={PER_INPUT_TIMEOUT}",
         f"-dict={dictionary}", "-rss_limit_mb=3072", "-max_len=8192", f"-artifact_prefix={artifacts}/",
         "-print_final_stats=1"],
        capture_output=True, text=True, timeout=TIME_BOX + 180, cwd=tmp_path)
    log = r.stderr
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    crashes = sorted(p.name for p in artifacts.iterdir())
    print(f"\nfuzz: {seeds} seeds, {done.group(1) if done else '?'} runs in {done.group(2) if done else '?'} s, "
          f"coverage {cov[-1][0] if cov else '?'} edges / {cov[-1][1] if cov else '?'} features, crashes {crashes}")
    assert r.returncode == 0 and not crashes, log[-6000:]
    assert done is not None, log[-3000:]
