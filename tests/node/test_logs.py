"""node.logs: the lines of a log a node keeps (those holding a filter string, with their context, as numbered
blocks) and the bounded reads of a log file from the prolog's offset."""

from __future__ import annotations

from attribution.node.logs import read_error_lines, read_file, select_lines

from tests.conftest import ROOT

ERROR_LINES = ROOT / "hooks" / "error-lines.patterns"


def _log(n: int, hits: dict[int, str]) -> bytes:
    return "".join(f"{hits.get(i, f'line {i} quiet')}\n" for i in range(1, n + 1)).encode()


def test_a_matching_line_is_kept_with_its_context_and_its_number():
    blocks, total, cut = select_lines(_log(100, {50: "NVRM: Xid (PCI:0000:3b:00): 79"}), [b"NVRM: Xid"], context=3)
    assert (total, cut) == (100, False)
    assert blocks == [[47, [f"line {i} quiet" for i in (47, 48, 49)] + ["NVRM: Xid (PCI:0000:3b:00): 79"]
                       + [f"line {i} quiet" for i in (51, 52, 53)]]]


def test_close_matches_share_one_block_and_far_ones_get_their_own():
    data = _log(100, {10: "a SXid x", 14: "b SXid y", 80: "c Link DOWN"})
    blocks, _, _ = select_lines(data, [b"SXid", b"Link DOWN"], context=2)
    assert [(b[0], len(b[1])) for b in blocks] == [(8, 9), (78, 5)]
    assert blocks[0][1][2] == "a SXid x" and blocks[0][1][6] == "b SXid y" and blocks[1][1][2] == "c Link DOWN"


def test_the_first_and_last_lines_and_a_missing_final_newline():
    data = b"Link DOWN first\nquiet\nquiet\nquiet\nlast Link DOWN"
    blocks, total, _ = select_lines(data, [b"Link DOWN"], context=1)
    assert total == 5
    assert blocks == [[1, ["Link DOWN first", "quiet"]], [4, ["quiet", "last Link DOWN"]]]
    blocks, _, _ = select_lines(data[:-len(b"quiet\nlast Link DOWN")] + b"last Link DOWN", [b"Link DOWN"], context=1)
    assert blocks == [[1, ["Link DOWN first", "quiet", "quiet", "last Link DOWN"]]]  # adjacent: one block


def test_nothing_matching_keeps_nothing_and_the_numbers_count_from_first_line():
    assert select_lines(_log(10, {}), [b"NVRM"]) == ([], 10, False)
    blocks, _, _ = select_lines(b"x\nNVRM here\n", [b"NVRM"], first_line=41, context=0)
    assert blocks == [[42, ["NVRM here"]]]


def test_the_kept_bytes_are_bounded_and_say_so():
    data = _log(10_000, {i: f"NVRM: Xid storm {i}" for i in range(1, 10_001)})
    blocks, total, cut = select_lines(data, [b"NVRM"], max_bytes=10_000)
    kept = sum(len(b[1]) for b in blocks)
    assert cut and total == 10_000 and 0 < kept < 10_000
    assert sum(len(x) + 1 for b in blocks for x in b[1]) <= 10_000


def test_undecodable_bytes_are_replaced_not_fatal():
    blocks, _, _ = select_lines(b"\xff\xfe NVRM: Xid 79\n", [b"NVRM"], context=0)
    assert blocks == [[1, ["\ufffd\ufffd NVRM: Xid 79"]]]


def test_a_log_file_is_read_from_the_prologs_offset_or_its_last_bytes(tmp_path):
    f = tmp_path / "kern.log"
    f.write_bytes(b"before the job\nduring the job\n")
    data, how = read_file(str(f), len(b"before the job\n"), 1 << 20)
    assert data == b"during the job\n" and how["status"] == "ok" and "job start" in how["notes"][0]
    data, how = read_file(str(f), 0, 20)  # no offset: the last 20 bytes, from the first whole line in them
    assert data == b"during the job\n" and "no job-start offset" in how["notes"][0]
    assert read_file(str(tmp_path / "none"), 0, 10)[1] == {"status": "missing", "reason": "no file"}
    assert read_file(str(tmp_path), 0, 10)[1]["status"] == "error"  # a folder is not a log


def test_nul_bytes_in_a_kept_line_become_spaces():
    blocks, _, _ = select_lines(b"\0\0NVRM: Xid 79\0tail\n", [b"NVRM"], context=0)
    assert blocks == [[1, ["  NVRM: Xid 79 tail"]]]


def test_an_error_looking_line_no_filter_string_holds_is_kept_alone_for_replay():
    """A line the pack's error-looking patterns match (hooks/error-lines.patterns) travels without context, so a
    later rule pack can be replayed on it (docs/replay.md); an informational NCCL line saying "Failed" does not."""
    errorlike = read_error_lines(str(ERROR_LINES))
    log = _log(100, {10: "thermald: sensor 7 read FAILED", 30: "NCCL INFO Failed to open libibverbs.so[.1]",
                     50: "NVRM: Xid (PCI:0000:3b:00): 79", 90: "Traceback (most recent call last):"})
    blocks, total, cut = select_lines(log, [b"NVRM: Xid"], context=1, errorlike=errorlike)
    assert (total, cut) == (100, False)
    assert blocks == [[10, ["thermald: sensor 7 read FAILED"]],
                      [49, ["line 49 quiet", "NVRM: Xid (PCI:0000:3b:00): 79", "line 51 quiet"]],
                      [90, ["Traceback (most recent call last):"]]]


def test_error_looking_lines_are_bounded_and_say_so():
    errorlike = read_error_lines(str(ERROR_LINES))
    log = "".join(f"worker {i} failed\n" for i in range(50)).encode()
    blocks, total, cut = select_lines(log, [b"NVRM: Xid"], errorlike=errorlike, max_errorlike=20)
    assert cut and total == 50 and blocks == [[1, [f"worker {i} failed" for i in range(20)]]]


def test_a_pattern_pythons_re_cannot_compile_is_left_out_and_no_file_means_none(tmp_path):
    f = tmp_path / "error-lines.patterns"
    f.write_text("(?P<x\n\\bboom\\b\n!boom ok\n")
    found, informational, strings, by_string = read_error_lines(str(f))
    assert found.search(b"a BOOM here") and informational.search(b"boom ok") and strings is None
    assert by_string is None
    assert read_error_lines(str(tmp_path / "none")) is None


def _corpus_logs():
    for folder in ("incidents", "cases", "realworld"):
        for p in sorted((ROOT / "tests" / folder).glob("*/**/*")):
            if p.is_file() and p.suffix in (".log", ".out", ".err", ".txt") and p.stat().st_size < (8 << 20):
                yield p


def test_the_strings_find_every_line_the_patterns_find_in_every_log_of_the_corpora():
    """The `=` strings of hooks/error-lines.patterns only narrow where the patterns are tried: on every log of
    tests/incidents, cases and realworld the error-looking lines are the same with them and without."""
    from attribution.node.logs import _error_lines

    found, informational, strings, by_string = read_error_lines(str(ERROR_LINES))
    assert strings and by_string, "the generated file gives strings, and each pattern its own"
    logs = list(_corpus_logs())
    assert len(logs) > 100
    total = 0
    for p in logs:
        data = p.read_bytes()
        fast = _error_lines(data, (found, informational, strings, by_string), 10 ** 6)
        together = _error_lines(data, (found, informational, strings, None), 10 ** 6)
        slow = _error_lines(data, (found, informational, None, None), 10 ** 6)
        assert fast == together == slow, p
        total += len(fast[0])
    assert total > 1000  # the corpora hold error-looking lines: the comparison compared something


def test_grep_finds_the_same_lines_as_python_in_every_log_of_the_corpora(monkeypatch):
    """Large logs are searched by grep -F (one pass for all the strings): on every log of the corpora, searched
    as if it were large, the kept blocks are those the Python search keeps."""
    from attribution.node import logs as nodelogs
    from attribution.node.logs import read_filter

    errorlike = read_error_lines(str(ERROR_LINES))
    strings = read_filter(str(ROOT / "hooks" / "suspicious.patterns"))
    used = []
    real = nodelogs._grep
    monkeypatch.setattr(nodelogs, "_grep", lambda *a: used.append(1) or real(*a))
    kept = 0
    for p in _corpus_logs():
        data = p.read_bytes()
        monkeypatch.setattr(nodelogs, "GREP_FROM_BYTES", 1 << 40)
        python = select_lines(data, strings, errorlike=errorlike)
        monkeypatch.setattr(nodelogs, "GREP_FROM_BYTES", 0)
        assert select_lines(data, strings, errorlike=errorlike) == python, p
        kept += len(python[0])
    assert used and kept > 500


def test_a_string_grep_o_passes_over_inside_another_still_gets_its_patterns_tried(tmp_path, monkeypatch):
    """grep -o goes on after each match: in `abcdef` it reports `abcd` and not `cdef`, which starts inside it.
    The line is still tried with `cdef`'s pattern (the strings that may overlap a reported one)."""
    from attribution.node import logs as nodelogs

    f = tmp_path / "error-lines.patterns"
    f.write_text("abcd\\d\t=abcd\ncdef\t=cdef\n=abcd\n=cdef\n")
    errorlike = read_error_lines(str(f))
    assert set(errorlike[3]) == {b"abcd", b"cdef"}
    data = b"quiet\nxx abcdef yy\nquiet\n"
    monkeypatch.setattr(nodelogs, "GREP_FROM_BYTES", 0)
    assert nodelogs._grep(data, ["-i", "-o"], [b"abcd", b"cdef"], None) == [b"9:abcd", b""]
    assert select_lines(data, [b"NVRM: Xid"], context=0, errorlike=errorlike) == ([[2, ["xx abcdef yy"]]], 3, False)


def test_without_grep_a_large_log_is_searched_in_python(monkeypatch):
    from attribution.node import logs as nodelogs

    errorlike = read_error_lines(str(ERROR_LINES))
    data = _log(50, {20: "NVRM: Xid (PCI:0000:3b:00): 79", 30: "worker 3 failed"})
    monkeypatch.setattr(nodelogs, "GREP_FROM_BYTES", 0)
    with_grep = select_lines(data, [b"NVRM: Xid"], context=0, errorlike=errorlike)
    monkeypatch.setattr(nodelogs, "GREP", ("/nonexistent/grep",))
    assert select_lines(data, [b"NVRM: Xid"], context=0, errorlike=errorlike) == with_grep
    assert [b[0] for b in with_grep[0]] == [20, 30]


def test_past_its_deadline_the_selection_stops_and_says_it_was_cut():
    errorlike = read_error_lines(str(ERROR_LINES))
    log = "".join(f"worker {i} failed\n" for i in range(5000)).encode()
    blocks, total, cut = select_lines(log, [b"NVRM: Xid"], errorlike=errorlike, deadline=0.0)
    assert (blocks, total, cut) == ([], 5000, True)
