"""The hooks' side of the database inbox (database.delivery: inbox): one report, one statement,
`SELECT attribution.submit_report($1)` over node/pgwire.py, within the hook's deadline.

The payload is the JSON the node would post to the service or write to its spool; the database keys it by a
digest of its canonical form, so submitting the same payload again (a spool replay after an answer that was
lost) is the same row. Failures raise pgwire.WireError (ServerError with the SQLSTATE when the server answered);
`ServerError.permanent` says sending it again cannot help. Busy servers ("too many connections", starting up)
are retried with backoff while time remains.
"""

from __future__ import annotations

import json
import random
import time

from attribution.errors import ConfigError
from attribution.node import pgwire

SUBMIT = "SELECT attribution.submit_report($1)"


def target_from_settings(settings) -> pgwire.Target:
    """The database of settings.database.url, with the password of database.password_file."""
    db = settings.database
    if not db.url:
        raise ConfigError("database.delivery is inbox but database.url is not set (the inbox is on a configured "
                          "server, not the embedded one)")
    password = None
    if db.password_file:
        from attribution.secrets import read_secret

        password = read_secret(db.password_file)
    try:
        return pgwire.parse_url(db.url, password=password)
    except ValueError as exc:
        raise ConfigError(f"database url: {exc}") from None


class Inbox:
    """A session for submitting reports (the hook's own and its spool's), opened on the first submit."""

    def __init__(self, target: pgwire.Target, settings, deadline: float) -> None:
        self.target = target
        self.db = settings.database
        self.deadline = deadline
        self._conn: pgwire.Connection | None = None

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> pgwire.Connection:
        if self._conn is None:
            ms = max(100, int(min(self.db.statement_timeout_ms, (self.deadline - time.monotonic()) * 1000)))
            self._conn = pgwire.connect(self.target, self.deadline, options=f"-c statement_timeout={ms}",
                                        application_name="attribution-epilog",
                                        connect_timeout=float(self.db.connect_timeout))
        return self._conn

    def submit(self, payload: dict) -> bool:
        """Put one report in the inbox; True when it is new, False when the inbox held it already."""
        text = json.dumps(payload, separators=(",", ":"))
        pause = 0.05
        while True:
            try:
                return self._connection().query_one(SUBMIT, text) == "t"
            except pgwire.ServerError as exc:
                if not exc.retryable:
                    raise
                self.__exit__()
                if time.monotonic() + pause + 0.2 >= self.deadline:
                    raise
                time.sleep(pause * (0.5 + random.random()))
                pause = min(2.0, pause * 2)
            except pgwire.WireError:
                self.__exit__()
                raise


__all__ = ["Inbox", "target_from_settings", "SUBMIT"]
