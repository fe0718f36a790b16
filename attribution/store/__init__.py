"""store: PostgreSQL as the system of record (events, links, verdicts, coverage, rollups).

Only this package and the collectors touch the outside world. It never imports the CLI, the API or a
collector; the pipeline module wires it to the engine.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from typing import Callable, TypeVar

import psycopg
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from attribution.errors import StoreError

T = TypeVar("T")

#: SQLSTATEs worth retrying: serialization failure, deadlock, lock timeout, admin shutdown / crash recovery,
#: cannot connect now, too many connections, and the connection exceptions (class 08).
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})
#: SQLSTATE classes meaning "this data can never be stored": data exception, integrity violation, program limit
#: (e.g. an index row too large). Retrying is useless; a spooled payload with such data is set aside.
PERMANENT_CLASSES = frozenset({"22", "23", "54"})
#: How long after a transaction's deadline its connection is severed if the server has not answered (M2).
SEVER_GRACE_SECONDS = 1.0
#: Never start an attempt with less than this left before the deadline (a connect alone may take 2 s).
MIN_ATTEMPT_SECONDS = 0.5


def _sqlstate(exc: BaseException) -> str | None:
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(orig, "sqlstate", None)


def _retryable(exc: BaseException) -> bool:
    code = _sqlstate(exc)
    if code is None:  # no server answer at all: refused, reset, timed out while connecting
        return isinstance(exc, (OperationalError, psycopg.OperationalError)) or bool(
            getattr(exc, "connection_invalidated", False))
    return code in RETRYABLE_SQLSTATES or code.startswith("08") or bool(
        getattr(exc, "connection_invalidated", False))


def _bound_timeouts(conn: Connection, deadline: float) -> None:
    """Lower this transaction's statement and lock timeouts to what is left before the deadline."""
    ms = max(100, int((deadline - time.monotonic()) * 1000))
    conn.execute(text(
        "SELECT set_config(name, (CASE WHEN setting::bigint = 0 OR setting::bigint > :ms THEN :ms "
        "ELSE setting::bigint END)::text, true) FROM pg_settings WHERE name IN ('statement_timeout', 'lock_timeout')"),
        {"ms": ms})


def in_transaction(engine: Engine, work: Callable[[Connection], T], attempts: int | None = None,
                   deadline: float | None = None, base_delay: float = 0.1) -> T:
    """Run `work` in one transaction; retry it from the start on deadlocks, lock timeouts, a full server ("too
    many connections") and lost connections, with bounded exponential backoff (at most 2 s). Without `deadline`
    it tries `attempts` times (default 5). With `deadline` (a time.monotonic() value) it keeps trying while
    time is left (a thousand epilogs of one job wait their turn instead of giving up), no attempt starts too
    close to the deadline, and each attempt's statement and lock timeouts end at it."""
    if attempts is None:
        attempts = 5 if deadline is None else 1_000_000
    last: BaseException | None = None
    attempt = 0
    for attempt in range(attempts):
        if deadline is not None and deadline - time.monotonic() < MIN_ATTEMPT_SECONDS:
            if last is None:
                raise StoreError("no time left before the deadline to try")
            break
        try:
            # the commit too happens before the deadline's watchdog is called off
            with engine.connect() as conn, _severed_at(conn, deadline), conn.begin():
                if deadline is not None:
                    _bound_timeouts(conn, deadline)
                return work(conn)
        except (DBAPIError, psycopg.Error) as exc:  # COPY through the driver raises psycopg's own errors
            if not _retryable(exc):
                code = _sqlstate(exc)
                raise StoreError(_describe(exc), permanent=bool(code and code[:2] in PERMANENT_CLASSES)) from exc
            last = exc
        delay = min(2.0, base_delay * (2 ** attempt)) * (0.5 + random.random())
        if deadline is not None and time.monotonic() + delay + MIN_ATTEMPT_SECONDS >= deadline:
            break
        time.sleep(delay)
    raise StoreError(f"gave up after {attempt + 1} attempt(s): {_describe(last)}") from last


@contextlib.contextmanager
def _severed_at(conn: Connection, deadline: float | None):
    """The client's own deadline on one transaction: at `deadline` the connection's socket is shut down, so a
    call blocked on a server that stopped answering (a proxy that keeps the TCP connection but forwards nothing:
    no statement timeout can fire on a server that never got the statement) fails at once, and the caller
    spools instead of being killed at its budget (issue 18, M2)."""
    if deadline is None:
        yield
        return
    try:
        fd = conn.connection.driver_connection.pgconn.socket
    except Exception:  # not a psycopg connection: nothing to sever
        yield
        return
    # a little after the deadline: the server's own statement and lock timeouts (bound to the deadline) answer
    # first when the server is there to answer; the callers keep more than this for spooling
    timer = threading.Timer(max(0.0, deadline - time.monotonic()) + SEVER_GRACE_SECONDS, _shutdown_socket,
                            args=(fd,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _shutdown_socket(fd: int) -> None:
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    orig = getattr(exc, "orig", None)
    msg = str(orig or exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__


#: How far ahead the maintenance step makes the monthly partitions of `events`.
PARTITION_MONTHS_AHEAD = 12


def make_partitions_ahead(engine: Engine, months: int = PARTITION_MONTHS_AHEAD) -> int:
    """The maintenance step that keeps ingest from ever changing the database's shape: the partitions of the
    coming `months` and the default partition (migration 0006). Returns how many it made (0 nearly always).
    Run by `attribution db upgrade` and `attribution db attribute-pending` (the timer), never by an ingest."""
    with engine.begin() as c:
        return int(c.execute(text("SELECT attribution.ensure_event_partitions(:m)"), {"m": months}).scalar() or 0)
