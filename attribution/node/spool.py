"""The local spool: reports waiting for the service, kept on disk and replayed exactly once.

Every report is written here first and sent from here (a flush), so a hook killed mid-way, a service away or slow
loses nothing; a report the service took is deleted, and one it took twice (a kill between its answer and the
delete) is the same report again, which the service stores once.

Each file is written whole or not at all (temporary name, fsync, rename, fsync of the directory) and carries
a checksum of its body, so a file cut off by a power loss is recognised and never replayed half. A flush
takes a lock, sends each file in the order written and deletes it; files that cannot be read, and payloads holding text that is not UTF-8 (which
nothing downstream can store), go to `bad/` with the reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from pathlib import Path

TYPE_CHECKING = False  # typing costs a hook run ~14 ms to import (bench): its Callable is for the annotation only
if TYPE_CHECKING:
    from typing import Callable


MAGIC = b"attribution-spool/1"
SUFFIX = ".spool"


class SpoolCorrupt(ValueError):
    pass


class Refused(Exception):
    """Raised by a flush handler for a payload that can never be stored (malformed, or refused for its content):
    it goes to `bad/` with the reason and the flush goes on, instead of holding back every later file."""


def encode(payload: dict) -> bytes:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return MAGIC + b" " + hashlib.sha256(body).hexdigest().encode() + b" " + str(len(body)).encode() + b"\n" + body


def decode(data: bytes) -> dict:
    head, sep, body = data.partition(b"\n")
    parts = head.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != MAGIC:
        raise SpoolCorrupt("not a spool file (bad header)")
    digest, length = parts[1].decode(errors="replace"), parts[2]
    if not length.isdigit() or len(length) > 19 or int(length) != len(body):
        raise SpoolCorrupt(f"truncated: {len(body)} of {length.decode(errors='replace')} bytes")
    if hashlib.sha256(body).hexdigest() != digest:
        raise SpoolCorrupt("checksum mismatch")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep for json
        raise SpoolCorrupt(f"bad JSON: {exc}") from None
    where = not_utf8(payload)
    if where is not None:  # neither PostgreSQL nor the service takes it: it would stop every flush (issue 18, M1)
        raise SpoolCorrupt(f"{where} is not UTF-8 text")
    return payload


def not_utf8(doc, path: str = "payload") -> str | None:
    """Where a JSON document holds text that is not UTF-8 (a lone surrogate: the bytes of a file name, a node or
    cluster name that were not UTF-8, escaped by json.dumps), or None."""
    stack = [(path, doc)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return where
        elif isinstance(v, dict):
            stack.extend((f"{where}.{k}", x) for k, x in v.items())
            stack.extend((f"{where} key", k) for k in v if isinstance(k, str))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in enumerate(v))
    return None


def write(spool_dir: Path, payload: dict) -> Path:
    """Write one payload atomically; returns its final path."""
    spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}{SUFFIX}"
    tmp = spool_dir / f".tmp-{name}"
    data = encode(payload)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    final = spool_dir / name
    os.rename(tmp, final)
    dfd = os.open(spool_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return final


def pending(spool_dir: Path) -> list[Path]:
    if not spool_dir.is_dir():
        return []
    return sorted(p for p in spool_dir.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith("."))


class FlushResult:
    """What one spool flush replayed, left, and set aside as unreadable."""

    __slots__ = ("replayed", "left", "bad", "error", "locked_out")

    def __init__(self) -> None:
        self.replayed, self.left, self.bad, self.error, self.locked_out = 0, 0, [], None, False


def flush(spool_dir: Path, store: Callable[[dict], None], deadline: float | None = None,
          wait_for_lock: bool = False, stale_tmp_seconds: float = 3600) -> FlushResult:
    """Replay pending files in order through `store`, each deleted once stored. A payload `store` refuses for
    good (`Refused`) goes to `bad/`; any other failure (the database is still away) stops the flush, as does
    `deadline` (a time.monotonic() value)."""
    res = FlushResult()
    if not spool_dir.is_dir():
        return res
    lock = os.open(spool_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait_for_lock else fcntl.LOCK_NB))
        except BlockingIOError:
            res.locked_out = True
            res.left = len(pending(spool_dir))
            return res
        _remove_stale_tmp(spool_dir, stale_tmp_seconds)
        files = pending(spool_dir)
        for i, path in enumerate(files):
            if deadline is not None and time.monotonic() >= deadline:
                res.left = len(files) - i
                break
            try:
                payload = decode(path.read_bytes())
            except (SpoolCorrupt, OSError) as exc:
                _quarantine(spool_dir, path, str(exc))
                res.bad.append(f"{path.name}: {exc}")
                continue
            try:
                store(payload)
            except Refused as exc:
                _quarantine(spool_dir, path, str(exc))
                res.bad.append(f"{path.name}: {exc}")
                continue
            except Exception as exc:  # the service is still away: keep the file for later
                res.error = f"{type(exc).__name__}: {exc}"
                res.left = len(files) - i
                break
            path.unlink()
            res.replayed += 1
        return res
    finally:
        os.close(lock)


def _quarantine(spool_dir: Path, path: Path, reason: str) -> None:
    bad = spool_dir / "bad"
    bad.mkdir(exist_ok=True, mode=0o700)
    target = bad / path.name
    os.rename(path, target)
    (bad / (path.name + ".reason")).write_text(reason + "\n")


def _remove_stale_tmp(spool_dir: Path, age: float) -> None:
    now = time.time()
    for p in spool_dir.iterdir():
        if p.name.startswith(".tmp-"):
            try:
                if now - p.stat().st_mtime > age:
                    p.unlink()
            except OSError:
                pass
