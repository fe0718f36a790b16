"""The embedded default database: one local PostgreSQL cluster that the tool initialises and starts itself.

A new user needs no server to try the tool: :class:`EmbeddedPostgres` runs ``initdb`` / ``pg_ctl`` from the
PostgreSQL 16 binaries bundled in the ``pgserver`` wheel (``pgserver/pginstall/bin``), or, only when ``pgserver`` is
not installed, from the newest ``/usr/lib/postgresql/*/bin``. The caller picks the data directory (the CLI uses
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
    (mode 0700). For that user to reach the data directory and the binaries, this class may ``chmod o+x`` (adds
    the search bit, nothing else) on ancestor directories of ``data_dir``, of the socket directory and of the
    PostgreSQL install that lack it and that the user cannot search otherwise: for example ``/root`` when the
    data lives under ``/root/.local/share``, or pytest's ``/tmp/pytest-of-root``. It never changes ``/``. When
    the bundled install tree itself is not world-readable (a venv made under ``umask 077``), it adds ``o+r``
    (and ``o+x`` on directories and executables) inside that tree only. Every change is logged at INFO on the
    ``attribution.store.embedded`` logger and listed in :attr:`EmbeddedPostgres.chmodded`.
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

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from attribution.errors import StoreError

__all__ = ["EmbeddedPostgres", "find_bin_dir"]

log = logging.getLogger(__name__)

#: OS users tried, in this order, when running as root and the cluster has no owner yet.
ROOT_USER_CANDIDATES: tuple[str, ...] = ("attribution-pg", "pgserver", "postgres")
#: The OS user created with useradd when none of the candidates exists.
DEFAULT_OS_USER = "attribution-pg"
#: The database superuser made by initdb (not an OS user).
SUPERUSER = "postgres"
#: Port number in the socket file name when the server listens on a unix socket only.
SOCKET_ONLY_PORT = 5432

_CONF_MARK = "# --- attribution embedded settings ---"
_RUNTIME_CONF = "attribution.runtime.conf"
_LOG_NAME = "server.log"
# sun_path is 108 bytes on Linux (104 on macOS) including the final NUL.
_MAX_SOCKET_PATH = 100


def find_bin_dir() -> Path:
    """The directory with ``initdb``/``pg_ctl``/``postgres``: pgserver's bundled ones, else the newest Debian ones.

    pgserver is located without importing it (importing it has side effects: it prepares a lock under
    ``$XDG_RUNTIME_DIR``); the path is the same as ``pgserver._commands.POSTGRES_BIN_PATH``.
    """
    try:
        spec = importlib.util.find_spec("pgserver")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "pginstall" / "bin"
        if (bundled / "pg_ctl").is_file():
            return bundled
    candidates = []
    for path in Path("/usr/lib/postgresql").glob("*/bin"):
        try:
            version = int(path.parent.name)
        except ValueError:
            continue
        if (path / "pg_ctl").is_file() and (path / "initdb").is_file():
            candidates.append((version, path))
    if candidates:
        return max(candidates)[1]
    raise StoreError(
        "no PostgreSQL binaries found for the embedded database: install the Python package 'pgserver' "
        "(it bundles PostgreSQL 16) or the Debian package 'postgresql', or set ATTRIBUTION_DATABASE_URL"
    )


@dataclass(frozen=True)
class _OsUser:
    name: str
    uid: int
    gid: int
    home: str
    groups: tuple[int, ...]  # every group id it is in (as initgroups would set)

    @classmethod
    def from_pwd(cls, pw: Any) -> _OsUser:
        try:
            groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        except OSError:
            groups = (pw.pw_gid,)
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir, groups)


@dataclass(frozen=True)
class _Result:
    returncode: int
    output: str


@dataclass(frozen=True)
class _PidFile:
    pid: int
    data_dir: str
    port: int | None
    socket_dir: str | None
    listen: str | None
    status: str | None


class EmbeddedPostgres:
    """One local PostgreSQL cluster under ``data_dir``, run with the bundled binaries.

    :param data_dir: the cluster directory (created by :meth:`init`; its parent is created if missing).
    :param port: also listen on ``127.0.0.1:port`` (TCP). ``None``: unix socket only.
    :param fast: turn off fsync, synchronous_commit and full_page_writes (tests only: a crash may lose data).
    :param os_user: the OS user to run the server as when the caller is root (default: see the module doc).
        Ignored when not root.
    :param bin_dir: PostgreSQL binaries (default: :func:`find_bin_dir`).

    After use, :attr:`chmodded` lists every permission change this object made, one line each, e.g.
    ``"chmod o+x /tmp/pytest-of-root (0700 -> 0701)"``.
    """

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        *,
        fast: bool = False,
        os_user: str | None = None,
        bin_dir: Path | str | None = None,
    ) -> None:
        if port is not None and not (isinstance(port, int) and 0 < port < 65536):
            raise StoreError(f"invalid port for the embedded database: {port!r}")
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.port = port
        self.fast = fast
        self.user = SUPERUSER
        self._requested_os_user = os_user
        self._bin_dir = Path(bin_dir).resolve() if bin_dir is not None else None
        self._os_user: _OsUser | None = None
        self._prepared = False
        self._thread_lock = threading.RLock()
        self._lock_depth = 0
        self._lock_fd: int | None = None
        self.chmodded: list[str] = []

    def __repr__(self) -> str:
        return f"EmbeddedPostgres({str(self.data_dir)!r}, port={self.port!r}, fast={self.fast!r})"

    # ------------------------------------------------------------------ paths

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir()
        return self._bin_dir

    @property
    def lock_path(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + ".lock")

    @property
    def log_path(self) -> Path:
        return self.data_dir / _LOG_NAME

    @property
    def socket_port(self) -> int:
        """The number in the socket file name ``.s.PGSQL.<n>``: the TCP port, or 5432 when socket-only."""
        return self.port if self.port is not None else SOCKET_ONLY_PORT

    @property
    def socket_dir(self) -> Path:
        """Where the unix socket lives: ``data_dir``, or a short private dir in /tmp when that path is too long."""
        if len(os.fsencode(str(self.data_dir / f".s.PGSQL.{self.socket_port}"))) <= _MAX_SOCKET_PATH:
            return self.data_dir
        digest = hashlib.sha256(os.fsencode(str(self.data_dir))).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"attribution-pg-{digest}"

    # ------------------------------------------------------------------ state

    def initialized(self) -> bool:
        """True when ``data_dir`` holds a PostgreSQL cluster."""
        try:
            return (self.data_dir / "PG_VERSION").is_file() and (self.data_dir / "postgresql.conf").is_file()
        except PermissionError as exc:
            raise StoreError(f"{self.data_dir}: cannot read the embedded database directory: {exc}") from exc

    def pid(self) -> int | None:
        """The postmaster's pid when the server is running, else None."""
        info = self._read_pidfile()
        if info is not None and self._is_our_postmaster(info.pid):
            return info.pid
        return None

    def is_running(self) -> bool:
        """True when postmaster.pid names a live postmaster for this data dir and ``pg_ctl status`` agrees."""
        if self.pid() is None:
            return False
        result = self._run_pg(["pg_ctl", "status", "-D", str(self.data_dir)], check=False)
        return result.returncode == 0

    # ------------------------------------------------------------------ lifecycle

    def init(self) -> bool:
        """Create the cluster with initdb (no-op if it exists). Returns True when it created one.

        trust authentication for the socket and for 127.0.0.1/::1 only, UTF8, ``--no-sync``; superuser
        ``postgres``; max_connections 200; listen settings as described in the module doc.
        """
        with self._locked():
            if self.initialized():
                return False
            if self.data_dir.exists() and (not self.data_dir.is_dir() or any(self.data_dir.iterdir())):
                raise StoreError(
                    f"{self.data_dir}: exists and is not a PostgreSQL data directory; "
                    "refusing to initialise the embedded database there"
                )
            self._prepare()
            user = self._get_os_user()
            parent = self.data_dir.parent
            for stale in parent.glob(f".{self.data_dir.name}.initdb-*"):
                shutil.rmtree(stale, ignore_errors=True)  # left by a killed initdb; we hold the lock
            tmp = parent / f".{self.data_dir.name}.initdb-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir(mode=0o700)
            try:
                if user is not None:
                    os.chown(tmp, user.uid, user.gid)
                started = time.monotonic()
                self._initdb(tmp)
                self._write_static_conf(tmp)
                self._write_runtime_conf(tmp)
                try:
                    os.rename(tmp, self.data_dir)
                except OSError as exc:
                    raise StoreError(f"{self.data_dir}: cannot move the new cluster into place: {exc}") from exc
                log.info("initialised embedded PostgreSQL in %s (%.2f s)", self.data_dir, time.monotonic() - started)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            return True

    def start(self, timeout: float = 30) -> None:
        """Start the server and wait until it accepts connections. Idempotent.

        If it already runs, returns (after waiting for it to be ready). A postmaster.pid left by a crash (the pid is
        dead or is not a postgres for this directory) is removed first. Raises StoreError if not initialised.
        """
        deadline = time.monotonic() + timeout
        with self._locked():
            if not self.initialized():
                raise StoreError(f"{self.data_dir}: no embedded database here yet (call init() or ensure_running())")
            if self.is_running():
                self._wait_ready(deadline)
                self._check_running_matches()
                return
            self._prepare()
            self._remove_stale_pidfile()
            self._write_runtime_conf(self.data_dir)
            self._prepare_socket_dir()
            self._remove_stale_socket_lock()
            while True:
                offset = self._log_size()
                remaining = max(1, int(deadline - time.monotonic()))
                result = self._run_pg(
                    ["pg_ctl", "start", "-w", "-t", str(remaining), "-D", str(self.data_dir), "-l", str(self.log_path)],
                    check=False,
                    new_session=True,
                    timeout=remaining + 10,
                )
                if result.returncode == 0:
                    break
                new_log = self._read_log(offset)
                # After a kill -9 of the postmaster its children may hold the old shared memory for a moment.
                transient = "pre-existing shared memory block" in new_log
                if transient and time.monotonic() < deadline - 0.3 and not self.is_running():
                    time.sleep(0.2)
                    self._remove_stale_pidfile()
                    self._remove_stale_socket_lock()
                    continue
                if self.is_running():  # another starter won a race we could not lock against
                    break
                raise StoreError(
                    f"could not start the embedded PostgreSQL in {self.data_dir} "
                    f"(pg_ctl exit {result.returncode}): {result.output.strip()}\n"
                    f"last lines of {self.log_path}:\n{self._tail(new_log or self._read_log(0))}"
                )
            self._wait_ready(deadline)

    def _check_running_matches(self) -> None:
        """A server already running on this directory must listen where this object says (url() relies on it)."""
        info = self._read_pidfile()
        if info is None:
            return
        want_tcp = "127.0.0.1" if self.port is not None else None
        if info.port != self.socket_port or (info.listen or None) != want_tcp:
            running = f"port {info.port}, TCP {info.listen or 'off'}"
            wanted = f"port {self.socket_port}, TCP {want_tcp or 'off'}"
            raise StoreError(
                f"the embedded PostgreSQL in {self.data_dir} is already running with {running}, not {wanted}; "
                "stop it first (or use the same port setting)"
            )

    def stop(self, mode: str = "fast", timeout: float = 60) -> None:
        """Stop the server (``pg_ctl stop -m mode``: smart, fast or immediate) and wait. No-op if not running."""
        if mode not in ("smart", "fast", "immediate"):
            raise StoreError(f"invalid stop mode {mode!r} (smart, fast or immediate)")
        with self._locked():
            if not self.is_running():
                return
            result = self._run_pg(
                ["pg_ctl", "stop", "-w", "-t", str(max(1, int(timeout))), "-m", mode, "-D", str(self.data_dir)],
                check=False,
                timeout=timeout + 10,
            )
            if result.returncode != 0 and self.is_running():
                raise StoreError(
                    f"could not stop the embedded PostgreSQL in {self.data_dir} "
                    f"(pg_ctl exit {result.returncode}): {result.output.strip()}\n"
                    f"last lines of {self.log_path}:\n{self._tail(self._read_log(0))}"
                )

    def restart(self, timeout: float = 30) -> None:
        """Stop (fast) if running, then start."""
        with self._locked():
            self.stop()
            self.start(timeout=timeout)

    def ensure_running(self, timeout: float = 30) -> str:
        """Init if needed, start if needed, create the ``attribution`` database if missing; return its URL."""
        with self._locked():
            self.init()
            self.start(timeout=timeout)
            self.ensure_database("attribution")
        return self.url("attribution")

    # ------------------------------------------------------------------ databases

    def url(self, dbname: str = "attribution") -> str:
        """SQLAlchemy URL of ``dbname``: TCP ``...@127.0.0.1:port/db`` when a port is set, else the unix socket."""
        db = quote(dbname, safe="")
        if self.port is not None:
            return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{db}"
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql+psycopg://{self.user}@/{db}?host={host}&port={self.socket_port}"

    def connect_kwargs(self, dbname: str = "postgres") -> dict[str, object]:
        """Keyword arguments for ``psycopg.connect`` over the unix socket."""
        return {"host": str(self.socket_dir), "port": self.socket_port, "user": self.user, "dbname": dbname}

    def ensure_database(self, name: str) -> bool:
        """CREATE DATABASE ``name`` unless it exists. Returns True when it created it. The server must run."""
        import psycopg
        from psycopg import errors, sql

        try:
            with psycopg.connect(**self.connect_kwargs("postgres"), autocommit=True, connect_timeout=10) as conn:
                if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                    return False
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                except (errors.DuplicateDatabase, errors.UniqueViolation):
                    return False  # created meanwhile by another process
                return True
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot create database {name!r} in the embedded PostgreSQL ({self.data_dir}): {exc}"
            ) from exc

    # ------------------------------------------------------------------ internals: locking

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive flock on ``<data_dir>.lock``; re-entrant within this object (and thread-safe).

        OSErrors raised inside become StoreErrors.
        """
        with self._thread_lock:
            if self._lock_depth == 0:
                try:
                    self.lock_path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError as exc:
                    raise StoreError(f"{self.lock_path}: cannot create the embedded database lock file: {exc}") from exc
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._lock_fd = fd
            self._lock_depth += 1
            try:
                yield
            except OSError as exc:  # a file-system problem in init/start/stop: one clear StoreError
                raise StoreError(f"embedded PostgreSQL in {self.data_dir}: {exc}") from exc
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0 and self._lock_fd is not None:
                    fd, self._lock_fd = self._lock_fd, None
                    try:
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    finally:
                        os.close(fd)

    # ------------------------------------------------------------------ internals: OS user and permissions

    def _get_os_user(self) -> _OsUser | None:
        """The OS user the server runs as when we are root; None when not root (run as ourselves)."""
        if os.geteuid() != 0:
            return None
        if self._os_user is not None:
            return self._os_user
        import pwd

        def entry(name: str) -> _OsUser | None:
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                return None
            return _OsUser.from_pwd(pw)

        chosen: _OsUser | None = None
        if self._requested_os_user:
            chosen = entry(self._requested_os_user)
            if chosen is None:
                raise StoreError(f"OS user {self._requested_os_user!r} for the embedded database does not exist")
        elif self.initialized():
            owner = self.data_dir.stat().st_uid
            if owner != 0:
                try:
                    chosen = _OsUser.from_pwd(pwd.getpwuid(owner))
                except KeyError:
                    raise StoreError(
                        f"{self.data_dir}: owned by uid {owner}, which has no passwd entry; cannot run its server"
                    ) from None
        if chosen is None:
            for name in ROOT_USER_CANDIDATES:
                chosen = entry(name)
                if chosen is not None:
                    break
        if chosen is None:
            useradd = shutil.which("useradd") or "/usr/sbin/useradd"
            proc = subprocess.run(
                [
                    useradd,
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    DEFAULT_OS_USER,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            chosen = entry(DEFAULT_OS_USER)  # also covers a concurrent useradd that won the race
            if chosen is None:
                raise StoreError(
                    f"running as root, the embedded PostgreSQL needs an unprivileged OS user, and "
                    f"'useradd {DEFAULT_OS_USER}' failed: {(proc.stderr or proc.stdout).strip()}"
                )
            log.info("created OS user %s for the embedded PostgreSQL", DEFAULT_OS_USER)
        if chosen.uid == 0:
            raise StoreError(f"OS user {chosen.name!r} is root; the embedded PostgreSQL needs an unprivileged one")
        self._os_user = chosen
        return chosen

    def _prepare(self) -> None:
        """As root: let the server's user reach data_dir and the binaries (see the module doc)."""
        if self._prepared:
            return
        user = self._get_os_user()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if user is not None:
            self._ensure_searchable_ancestors(self.data_dir, user)
            install_root = self.bin_dir.parent
            self._ensure_searchable_ancestors(install_root, user)
            self._ensure_tree_readable(install_root)
            # pgserver's wheel keeps libpq & co. in site-packages/pgserver.libs (RPATH $ORIGIN/../../../pgserver.libs)
            parents = self.bin_dir.parents
            wheel_libs = parents[2] / "pgserver.libs" if len(parents) > 2 else None
            if wheel_libs is not None and wheel_libs.is_dir():
                self._ensure_tree_readable(wheel_libs)
        self._prepared = True

    def _user_can_search(self, st: os.stat_result, user: _OsUser) -> bool:
        if st.st_mode & stat.S_IXOTH:
            return True
        if st.st_uid == user.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        return bool(st.st_mode & stat.S_IXGRP) and st.st_gid in user.groups

    def _chmod(self, path: Path, new_mode: int, old_mode: int) -> None:
        os.chmod(path, new_mode)
        self._note(f"chmod o+x {path} ({old_mode:04o} -> {new_mode:04o})")

    def _note(self, change: str) -> None:
        self.chmodded.append(change)
        log.info("%s, for the embedded PostgreSQL's OS user", change)

    def _ensure_searchable_ancestors(self, path: Path, user: _OsUser) -> None:
        """chmod o+x every ancestor of ``path`` (not ``/``) that ``user`` cannot search."""
        for ancestor in reversed(path.parents):
            st = ancestor.stat()
            if self._user_can_search(st, user):
                continue
            if ancestor == Path(ancestor.anchor):
                raise StoreError(f"'/' is not searchable by {user.name}; refusing to change it")
            mode = stat.S_IMODE(st.st_mode)
            self._chmod(ancestor, mode | stat.S_IXOTH, mode)

    def _ensure_tree_readable(self, root: Path) -> None:
        """Make the PostgreSQL install tree readable by others if it is not (umask 077 installs)."""
        probes = [root, *root.iterdir()]
        if root == self.bin_dir.parent:
            probes += [self.bin_dir / "postgres", self.bin_dir / "initdb", self.bin_dir / "pg_ctl"]
        needs = False
        for probe in probes:
            mode = probe.stat().st_mode
            want = stat.S_IROTH | stat.S_IXOTH if (probe.is_dir() or mode & stat.S_IXUSR) else stat.S_IROTH
            if mode & want != want:
                needs = True
                break
        if not needs:
            return
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames, None]:
                p = Path(dirpath) if name is None else Path(dirpath) / name
                if p.is_symlink():
                    continue
                mode = stat.S_IMODE(p.stat().st_mode)
                add = stat.S_IROTH | (stat.S_IXOTH if (p.is_dir() or mode & stat.S_IXUSR) else 0)
                if mode & add != add:
                    os.chmod(p, mode | add)
        self._note(f"chmod -R o+rX {root}")

    def _prepare_socket_dir(self) -> None:
        sock = self.socket_dir
        if sock == self.data_dir:
            return
        user = self._get_os_user()
        owner_uid = user.uid if user is not None else os.geteuid()
        try:
            sock.mkdir(mode=0o700)
            if user is not None:
                os.chown(sock, user.uid, user.gid)
        except FileExistsError:
            pass
        st = os.lstat(sock)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner_uid or stat.S_IMODE(st.st_mode) & 0o077:
            raise StoreError(
                f"{sock}: socket directory exists but is not a private (0700) directory of uid {owner_uid}"
            )
        if user is not None:
            self._ensure_searchable_ancestors(sock, user)

    # ------------------------------------------------------------------ internals: running binaries

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        user = self._get_os_user()
        if user is not None:
            env.update(HOME=user.home if os.path.isdir(user.home) else "/", USER=user.name, LOGNAME=user.name)
        return env

    def _run_pg(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        new_session: bool = False,
        timeout: float | None = 120,
    ) -> _Result:
        """Run a PostgreSQL program from bin_dir as the server's OS user; stdout+stderr go to a temp file.

        (A pipe would be inherited by the daemon pg_ctl starts and could block the read.)
        """
        exe = self.bin_dir / argv[0]
        user = self._get_os_user()
        kwargs: dict[str, object] = {}
        if user is not None:
            kwargs.update(user=user.uid, group=user.gid, extra_groups=list(user.groups))
        with tempfile.TemporaryFile("w+") as out:
            try:
                proc = subprocess.run(
                    [str(exe), *argv[1:]],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self._env(),
                    cwd="/",
                    start_new_session=new_session,
                    timeout=timeout,
                    check=False,
                    **kwargs,  # type: ignore[arg-type]
                )
                code = proc.returncode
            except subprocess.TimeoutExpired:
                code = -1
            except OSError as exc:
                raise StoreError(f"cannot run {exe}: {exc}") from exc
            out.seek(0)
            output = out.read()
        if code == -1:
            output += f"\n(timed out after {timeout} s)"
        result = _Result(code, output)
        if check and code != 0:
            raise StoreError(
                f"{argv[0]} failed for the embedded PostgreSQL in {self.data_dir} (exit {code}): {output.strip()}"
            )
        return result

    def _initdb(self, target: Path) -> None:
        base = [
            "initdb",
            "-D",
            str(target),
            "-U",
            SUPERUSER,
            "--auth-local=trust",
            "--auth-host=trust",
            "--encoding=UTF8",
            "--no-sync",
            "--no-instructions",
        ]
        result = self._run_pg([*base, "--locale=C.UTF-8"], check=False)
        if result.returncode != 0 and "locale" in result.output.lower():
            # No C.UTF-8 locale on this system: plain C (byte order) with UTF8 encoding works everywhere.
            for child in target.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            result = self._run_pg([*base, "--no-locale"], check=False)
        if result.returncode != 0:
            raise StoreError(f"initdb failed for the embedded PostgreSQL in {self.data_dir}: {result.output.strip()}")

    def _listen_settings(self) -> dict[str, str]:
        return {
            "listen_addresses": "127.0.0.1" if self.port is not None else "",
            "port": str(self.socket_port),
            "unix_socket_directories": str(self.socket_dir),
        }

    def _fast_settings(self) -> dict[str, str]:
        value = "off" if self.fast else "on"
        return {"fsync": value, "synchronous_commit": value, "full_page_writes": value}

    @staticmethod
    def _conf_lines(settings: dict[str, str]) -> list[str]:
        return [f"{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in settings.items()]

    def _write_static_conf(self, target: Path) -> None:
        """Append our settings to postgresql.conf; instance-specific ones are repeated in the runtime include."""
        static = {
            "max_connections": "200",
            "unix_socket_permissions": "0700",
            "logging_collector": "off",
            "log_line_prefix": "%m [%p] ",
            "log_timezone": "UTC",
            **self._listen_settings(),
            **self._fast_settings(),
        }
        lines = [
            "",
            _CONF_MARK,
            *self._conf_lines(static),
            "# written by every start() from the EmbeddedPostgres settings (port, socket dir, fast):",
            f"include_if_exists = '{_RUNTIME_CONF}'",
            "",
        ]
        with open(target / "postgresql.conf", "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines))

    def _write_runtime_conf(self, target: Path) -> None:
        text = "\n".join(
            [
                "# managed by attribution.store.embedded; rewritten at every start",
                *self._conf_lines({**self._listen_settings(), **self._fast_settings()}),
                "",
            ]
        )
        path = target / _RUNTIME_CONF
        try:
            if path.read_text(encoding="utf-8") == text:
                return
        except OSError:
            pass
        tmp = target / f".{_RUNTIME_CONF}.{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        user = self._get_os_user()
        if user is not None:
            os.chown(tmp, user.uid, user.gid)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ internals: postmaster.pid and the log

    def _read_pidfile(self) -> _PidFile | None:
        try:
            lines = (self.data_dir / "postmaster.pid").read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{self.data_dir}/postmaster.pid: cannot read: {exc}") from exc
        if not lines or not lines[0].strip().lstrip("-").isdigit():
            return None

        def line(i: int) -> str | None:
            return lines[i].strip() if len(lines) > i and lines[i].strip() else None

        port = line(3)
        return _PidFile(
            pid=abs(int(lines[0].strip())),
            data_dir=line(1) or "",
            port=int(port) if port and port.isdigit() else None,
            socket_dir=line(4),
            listen=line(5),
            status=line(7),
        )

    def _is_our_postmaster(self, pid: int) -> bool:
        """pid is alive, not a zombie, and (where /proc exists) a postgres started on this data dir."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        proc = Path(f"/proc/{pid}")
        if not Path("/proc/self").exists():
            return True
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            state = re.search(rb"^State:\s*(\S)", (proc / "status").read_bytes(), re.M)
        except OSError:
            return False
        if not cmdline or not cmdline[0] or (state and state.group(1) in (b"Z", b"X")):
            return False
        if not os.path.basename(cmdline[0]).startswith(b"postgres"):
            return False
        target = os.fsencode(str(self.data_dir))
        args = [a.rstrip(b"/") for a in cmdline]
        return target in args

    def _remove_stale_pidfile(self) -> None:
        info = self._read_pidfile()
        path = self.data_dir / "postmaster.pid"
        if info is None:
            if path.exists() and path.stat().st_size == 0:
                path.unlink(missing_ok=True)  # empty file left by a crash during startup
            return
        if not self._is_our_postmaster(info.pid):
            log.info("removing stale %s (pid %s is not running)", path, info.pid)
            path.unlink(missing_ok=True)

    def _remove_stale_socket_lock(self) -> None:
        """Remove ``.s.PGSQL.<port>.lock`` left by a killed postmaster.

        postgres itself treats the lock as stale only when its pid is gone; a killed postmaster that its new parent
        has not reaped yet (a zombie) still passes that test and would block the start.
        """
        path = self.socket_dir / f".s.PGSQL.{self.socket_port}.lock"
        try:
            first = path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
        except FileNotFoundError:
            return
        pid = abs(int(first)) if first.lstrip("-").isdigit() else None
        if pid is None or not self._is_our_postmaster(pid):
            log.info("removing stale %s (pid %s is not running)", path, pid)
            path.unlink(missing_ok=True)

    def _wait_ready(self, deadline: float) -> None:
        while True:
            info = self._read_pidfile()
            alive = info is not None and self._is_our_postmaster(info.pid)
            if alive and info is not None and info.status in ("ready", "standby"):
                return
            if not alive:
                raise StoreError(
                    f"the embedded PostgreSQL in {self.data_dir} is not running\n"
                    f"last lines of {self.log_path}:\n{self._tail(self._read_log(0))}"
                )
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"the embedded PostgreSQL in {self.data_dir} did not become ready in time "
                    f"(status {info.status if info else None!r})\n"
                    f"last lines of {self.log_path}:\n{self._tail(self._read_log(0))}"
                )
            time.sleep(0.05)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _read_log(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    @staticmethod
    def _tail(text: str, lines: int = 15) -> str:
        tail = text.strip().splitlines()[-lines:]
        return "\n".join(f"  {line}" for line in tail) if tail else "  (empty)"
