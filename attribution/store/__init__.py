"""store: PostgreSQL as the system of record (events, links, verdicts, coverage, rollups).

Only this package and the collectors touch the outside world. It never imports the CLI, the API or a
collector; the pipeline module wires it to the engine.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from ..errors import StoreError

T = TypeVar("T")

#: SQLSTATEs worth retrying: serialization failure, deadlock, lock timeout, admin shutdown / crash recovery,
#: cannot connect now, too many connections.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08000", "08003",
                                 "08006", "08001", "08004"})


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError):
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None)
        return code in RETRYABLE_SQLSTATES or bool(getattr(exc, "connection_invalidated", False))
    return False


def in_transaction(engine: Engine, work: Callable[[Connection], T], attempts: int = 5,
                   deadline: float | None = None, base_delay: float = 0.1) -> T:
    """Run `work` in one transaction; retry it from the start on deadlocks, lock timeouts and lost connections,
    with bounded exponential backoff, never past `deadline` (a time.monotonic() value)."""
    last: BaseException | None = None
    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                return work(conn)
        except DBAPIError as exc:
            if not _retryable(exc):
                raise StoreError(_describe(exc)) from exc
            last = exc
        delay = min(2.0, base_delay * (2 ** attempt)) * (0.5 + random.random())
        if deadline is not None and time.monotonic() + delay >= deadline:
            break
        time.sleep(delay)
    raise StoreError(f"gave up after {attempt + 1} attempt(s): {_describe(last)}") from last


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    orig = getattr(exc, "orig", None)
    msg = str(orig or exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__
