"""Rule skeletons of `rules suggest` (attribution.replay.suggest): the near-miss they carry."""

from __future__ import annotations

from attribution.replay.suggest import Unmatched, mine


def test_a_near_miss_is_a_fleet_line_sharing_half_the_words_else_an_example_with_its_last_word_changed():
    def u(job, text):
        return Unmatched(job, "job", f"job/slurm-{job}.out:1", text, text, 8.0, True)

    lines = [u(str(i), f"loader: shard {i} checksum mismatch in /d/s{i}.bin") for i in range(3)]
    # 9 tokens, so another template; it shares loader:, shard, checksum and in: four of the five literal words
    (t,) = mine(lines + [u("9", "loader: shard 7 checksum verified in /d/s7.bin after retry")], min_jobs=3)
    assert t.template == "loader: shard <*> checksum mismatch in <*>"
    assert (t.near_miss, t.near_miss_real) == ("loader: shard 7 checksum verified in /d/s7.bin after retry", True)
    (t,) = mine(lines + [u("9", "loader: done")], min_jobs=3)  # one shared word of five: not alike
    assert (t.near_miss, t.near_miss_real) == ("loader: shard 0 checksum mismatch ok /d/s0.bin", False)


def _mined(ruleset, tmp_path, jobs: list[tuple[str, ...]]):
    from attribution.collect.bundle import collect_bundle
    from attribution.replay.keep import pack_errorlike
    from attribution.replay.suggest import unmatched
    from attribution.scope.bundle import load_context

    from tests.harness.replay import failed_job_bundle

    lines = []
    for i, job_lines in enumerate(jobs):
        b = failed_job_bundle(tmp_path / f"j{i}", str(700 + i), f"g{i:02d}", [], job_lines=job_lines)
        ctx = load_context(b / "context.yaml")
        observations, _ = collect_bundle(b, ctx, lambda _source: pack_errorlike(ruleset))
        lines += unmatched(ruleset, observations, f"c/{700 + i}", 8.0, True)
    return lines, mine(lines, min_jobs=3)


def test_suggest_ranks_no_informational_line_and_no_line_the_pack_ignores(ruleset, tmp_path):
    """Issue #32: an NCCL INFO line with "Failed" or "cannot" in it (every healthy NCCL job without InfiniBand
    prints them) is not error-looking, so it never ranks; nor does a line an `ignore:` entry sets aside (PyTorch's
    advice after a CUDA error). The one real unmatched message is the only template."""
    info = ("g{i:02d}:4242:4300 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: "
            "cannot open shared object file: No such file or directory")
    jobs = [(info.format(i=i), "g%02d:4242:4300 [0] NCCL INFO Failed to open libibverbs.so[.1]" % i,
             "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.",
             f"trainer: fatal: shard {i} checksum mismatch in /d/s{i}.bin") for i in range(4)]
    lines, templates = _mined(ruleset, tmp_path, jobs)
    assert [t.template for t in templates] == ["trainer: fatal: shard <*> checksum mismatch in <*>"]
    assert not any("NCCL INFO" in u.line or "asynchronously" in u.line for u in lines)

