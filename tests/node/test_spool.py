"""The spool: written whole or not at all, never replayed half, each file stored once."""

from __future__ import annotations

import os

import pytest

from attribution.node import spool


def test_round_trip_and_order(tmp_path):
    for i in range(3):
        spool.write(tmp_path, {"n": i})
    seen = []
    res = spool.flush(tmp_path, seen.append)
    assert seen == [{"n": 0}, {"n": 1}, {"n": 2}] and res.replayed == 3 and spool.pending(tmp_path) == []
    assert spool.flush(tmp_path, seen.append).replayed == 0  # flushing twice adds nothing


def test_a_file_cut_off_mid_write_is_never_replayed(tmp_path):
    good = spool.write(tmp_path, {"n": 1, "pad": "x" * 1000})
    cut = tmp_path / ("0" + good.name)
    cut.write_bytes(good.read_bytes()[:600])  # power loss after the rename but before the data hit the disk
    seen = []
    res = spool.flush(tmp_path, seen.append)
    assert seen == [{"n": 1, "pad": "x" * 1000}]
    assert len(res.bad) == 1 and "truncated" in res.bad[0]
    assert (tmp_path / "bad" / cut.name).exists() and spool.pending(tmp_path) == []


def test_unfinished_temporary_files_are_ignored(tmp_path):
    (tmp_path / ".tmp-123.spool").write_bytes(b"attribution-spool/1 half")
    assert spool.pending(tmp_path) == []
    assert spool.flush(tmp_path, lambda d: None).replayed == 0


def test_corrupted_body(tmp_path):
    p = spool.write(tmp_path, {"n": 1})
    data = bytearray(p.read_bytes())
    data[-2] ^= 0x01
    p.write_bytes(bytes(data))
    res = spool.flush(tmp_path, lambda d: None)
    assert res.replayed == 0 and "checksum" in res.bad[0]


def test_a_failing_store_keeps_the_file_and_stops(tmp_path):
    spool.write(tmp_path, {"n": 1})
    spool.write(tmp_path, {"n": 2})

    def down(_):
        raise ConnectionError("database away")

    res = spool.flush(tmp_path, down)
    assert res.replayed == 0 and res.left == 2 and "database away" in res.error
    assert len(spool.pending(tmp_path)) == 2


def test_a_crash_between_store_and_delete_replays_again_harmlessly(tmp_path):
    """Ingest is idempotent, so storing a file twice is safe; the spool only promises no half replay."""
    spool.write(tmp_path, {"n": 1})
    calls = []

    def crash_after_store(d):
        calls.append(d)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        spool.flush(tmp_path, crash_after_store)
    assert len(spool.pending(tmp_path)) == 1
    spool.flush(tmp_path, calls.append)
    assert calls == [{"n": 1}, {"n": 1}] and spool.pending(tmp_path) == []


def test_only_one_flush_at_a_time(tmp_path):
    import fcntl

    spool.write(tmp_path, {"n": 1})
    fd = os.open(tmp_path / ".lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        res = spool.flush(tmp_path, lambda d: None)
        assert res.locked_out and res.left == 1
    finally:
        os.close(fd)


def test_files_are_private(tmp_path):
    p = spool.write(tmp_path / "s", {"secret": "evidence"})
    assert oct(p.stat().st_mode & 0o777) == "0o600"
