"""Connecting to the store: a configured server, or the embedded default the tool starts itself."""

from __future__ import annotations

import time

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from attribution.errors import ConfigError, StoreError
from attribution.secrets import read_secret

if TYPE_CHECKING:  # the node agent passes its own settings (node/settings.py): the same fields
    from attribution.config import Settings


@dataclass(frozen=True)
class Target:
    url: URL
    embedded: bool


def resolve_target(settings: Settings) -> Target:
    """The database to use: `database.url` (+ password file) or the embedded PostgreSQL under the home dir.
    Never starts anything: the embedded server is started by holding its lease (store.lease.embedded_lease)."""
    db = settings.database
    if db.url:
        try:
            url = make_url(db.url)
        except ArgumentError as exc:
            raise ConfigError(f"database url is not a SQLAlchemy URL: {exc}") from None
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        if db.password_file:
            url = url.set(password=read_secret(db.password_file))
        return Target(url, embedded=False)
    from attribution.store.embedded import EmbeddedPostgres

    return Target(make_url(EmbeddedPostgres(settings.embedded_dir).url()), embedded=True)


def make_engine(target: Target, settings: Settings, application_name: str = "attribution",
                pool_size: int | None = None, deadline: float | None = None) -> Engine:
    """An engine for the store. With `deadline` (a time.monotonic() value) no connection attempt waits past it."""
    db = settings.database
    options = (f"-c statement_timeout={int(db.statement_timeout_ms)} -c lock_timeout={int(db.lock_timeout_ms)} "
               f"-c idle_in_transaction_session_timeout={int(db.idle_in_transaction_timeout_ms)}")
    tcp = max(3, int(db.tcp_timeout_seconds))
    engine = create_engine(
        target.url,
        pool_size=pool_size or db.pool_size,
        max_overflow=0,
        pool_pre_ping=True,
        connect_args={"connect_timeout": max(1, int(db.connect_timeout)), "options": options,
                      "application_name": application_name,
                      # a peer that stops answering is noticed by the kernel (the client's own deadline, in
                      # store.in_transaction, covers a proxy that keeps the TCP connection alive but forwards nothing)
                      "keepalives": 1, "keepalives_idle": max(1, tcp // 3), "keepalives_interval": max(1, tcp // 6),
                      "keepalives_count": 3, "tcp_user_timeout": tcp * 1000},
    )

    if deadline is not None:
        @event.listens_for(engine, "do_connect")
        def _bounded(_dialect, _rec, _cargs, cparams):
            left = int(deadline - time.monotonic())
            cparams["connect_timeout"] = max(2, min(int(cparams.get("connect_timeout") or left), left))

    @event.listens_for(engine, "connect")
    def _utc(dbapi_conn, _record):  # every session in UTC: week boundaries and casts do not depend on the server
        with dbapi_conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        dbapi_conn.commit()

    return engine


def describe(url: URL) -> str:
    """A URL fit for messages and logs: never the password."""
    return url.render_as_string(hide_password=True)


__all__ = ["Target", "resolve_target", "make_engine", "describe", "StoreError"]
