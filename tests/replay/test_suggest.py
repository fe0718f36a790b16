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
