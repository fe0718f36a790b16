"""EmbeddedPostgres: one local PostgreSQL cluster the tool initialises, starts and stops (the package doc)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from attribution.errors import StoreError
from attribution.store.embedded._common import (SOCKET_ONLY_PORT, SUPERUSER, _LOG_NAME, _MAX_SOCKET_PATH, _OsUser,
    _Result, log)
from attribution.store.embedded.access import AccessMixin
from attribution.store.embedded.binaries import find_bin_dir
from attribution.store.embedded.files import FilesMixin


class EmbeddedPostgres(AccessMixin, FilesMixin):
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
        self._created: set[Path] = set()  # directories this object made: the only ones whose mode it may change

    def __repr__(self) -> str:
        return f"EmbeddedPostgres({str(self.data_dir)!r}, port={self.port!r}, fast={self.fast!r})"

    # ------------------------------------------------------------------ paths

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir(self.data_dir)
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

