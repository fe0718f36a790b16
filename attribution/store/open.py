"""The engine every command works on: the configured database, or the embedded one (started for the command and
stopped after the last command using it, unless `attribution db start` keeps it running). An embedded database is
migrated to the newest schema first and given a drain policy when it has none (`drain_policy`: the caller's, read
only then)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from attribution.config import Settings
    from attribution.drain.policy import DrainPolicy


@contextlib.contextmanager
def open_store(settings: Settings, auto_migrate: bool = True, pool_size: int | None = None,
               application_name: str = "attribution", deadline: float | None = None,
               drain_policy: Callable[[], DrainPolicy] | None = None) -> Iterator[Engine]:
    """An engine on the configured database, or on the embedded one; disposed of after the block."""
    from attribution.store import db as storedb
    from attribution.store import migrate
    from attribution.store.lease import embedded_lease

    started = embedded_lease(settings) if not settings.database.url else contextlib.nullcontext(
        storedb.resolve_target(settings))
    with started as target:
        engine = storedb.make_engine(target, settings, pool_size=pool_size, application_name=application_name,
                                     deadline=deadline)
        try:
            if target.embedded and auto_migrate:
                migrate.upgrade(engine)
                ensure_drain_policy(engine, drain_policy)
            yield engine
        finally:
            engine.dispose()


def ensure_drain_policy(engine: Engine, drain_policy: Callable[[], DrainPolicy] | None) -> None:
    """A database without a drain policy gets `drain_policy()` (the rule pack's, rules/drain-policy.yaml), so the
    drain_candidates view answers from the first migration on; one already loaded (by `drain plan|apply`) is left
    as it is, and so is a database without one when no policy is given."""
    from sqlalchemy import text

    with engine.connect() as c:
        if c.execute(text("SELECT EXISTS (SELECT 1 FROM attribution.drain_policies)")).scalar():
            return
    if drain_policy is None:
        return
    from attribution.store import drain as sd

    sd.load_policy(engine, drain_policy())


__all__ = ["open_store", "ensure_drain_policy"]
