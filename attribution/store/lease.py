"""Starting the embedded database is an explicit lease: resolving a URL (store.db.resolve_target) never starts it.

Commands share the embedded server: each holds a shared lock on a lease file while it works, the server started
for it if need be; the last one out stops the server, unless `attribution db start` asked to keep it running
(the keep marker beside the data directory).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from sqlalchemy.engine import make_url

from attribution.config import Settings
from attribution.store.db import Target


def keep_marker(pg) -> Path:
    """The file whose presence keeps the embedded server running after the last command (`db start`)."""
    return pg.data_dir.with_name(pg.data_dir.name + ".keep")


@contextlib.contextmanager
def embedded_lease(settings: Settings) -> Iterator[Target]:
    """The embedded database, started if it is not running, for the time of the `with` block."""
    from attribution.store.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(settings.embedded_dir)
    lease = pg.data_dir.with_name(pg.data_dir.name + ".users")
    lease.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lease, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            yield Target(make_url(pg.ensure_running()), embedded=True)
        finally:  # a failed command stops the server too
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                last = True
            except BlockingIOError:
                last = False  # another command still uses the server
            if last and not keep_marker(pg).exists() and pg.is_running():
                pg.stop()
    finally:
        os.close(fd)
