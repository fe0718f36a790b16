"""PostgreSQL for the test suite: one throw-away server per test run, a fresh database per test.

Use from the root conftest (either form)::

    pytest_plugins = ["tests.harness.pg"]      # preferred: registered once, whoever names it first
    # or
    from tests.harness.pg import *  # noqa: F401,F403

(Do not mix the two: fixtures imported into a module are separate copies, so a second session server would start.)

Fixtures
    ``pg_server`` (session)
        A :class:`PgTestServer`. By default an :class:`~attribution.store.embedded.EmbeddedPostgres` started once for the
        whole run in a private temp dir, with ``fast=True`` (no fsync), listening on 127.0.0.1 on a free TCP port
        (and its unix socket); stopped and deleted at the end. ``pg_server.embedded`` is that instance, so a test
        may ``restart()`` or ``stop()``/``start()`` it (``pg_url`` starts it again if a test left it stopped).
        It never uses a PostgreSQL that already runs (such as one on 127.0.0.1:5432).
        If ``ATTRIBUTION_TEST_DATABASE_URL`` is set (any SQLAlchemy/libpq URL of a role that may CREATE DATABASE),
        that server is used instead and ``pg_server.embedded`` is None (tests that restart the server skip).
    ``pg_template_loaders`` (session, override it)
        A list of callables ``loader(url: str)`` run once against the template database, e.g. Alembic
        ``upgrade head``. Default: none (an empty database).
    ``pg_template`` (session)
        Name of the template database, made from ``pg_template_loaders``; unique per test run, dropped at the end.
    ``pg_url`` (function)
        SQLAlchemy URL (``postgresql+psycopg://...``) of a new database ``test_<hex>`` copied from the template
        (``CREATE DATABASE ... TEMPLATE``), dropped after the test.
    ``pg_engine`` (function)
        A SQLAlchemy engine on ``pg_url``, disposed after the test.
    ``pg_noproc`` (session) and ``postgresql`` (function)
        pytest-postgresql's ``NoopExecutor`` for the same server and its ``postgresql`` client fixture (a psycopg
        connection to a fresh database copied from the same template), when pytest-postgresql is installed.
    ``embedded_factory`` (function)
        ``embedded_factory(port=None | "auto" | int, fast=True, name="data", **kwargs) -> EmbeddedPostgres`` in a
        private temp dir (``embedded_factory.tmp_dir``), for tests of the embedded server itself; every server it
        made is stopped and the dir removed after.

Ports and sockets: a free port is chosen by binding 127.0.0.1:0; if the server still loses the race for it, a new
port is tried (up to 5 times).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from attribution.store.embedded import EmbeddedPostgres
from attribution.errors import StoreError

__all__ = [
    "PgTestServer",
    "free_port",
    "start_test_server",
    "pg_server",
    "pg_template_loaders",
    "pg_template",
    "pg_url",
    "pg_engine",
    "embedded_factory",
]

ENV_URL = "ATTRIBUTION_TEST_DATABASE_URL"
DRIVER = "postgresql+psycopg"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class PgTestServer:
    """Connection facts of the test server plus small admin helpers (CREATE/DROP DATABASE)."""

    base_url: str  # SQLAlchemy URL of the maintenance database
    embedded: EmbeddedPostgres | None = None
    tmp_dir: Path | None = None
    _url: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from sqlalchemy.engine import make_url

        url = make_url(self.base_url)
        if url.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
            url = url.set(drivername=DRIVER)
        self._url = url

    # connection facts (as pytest-postgresql wants them)
    @property
    def host(self) -> str:
        query_host = self._url.query.get("host")
        if isinstance(query_host, tuple):
            query_host = query_host[0]
        return self._url.host or query_host or "127.0.0.1"

    @property
    def port(self) -> int:
        query_port = self._url.query.get("port")
        if isinstance(query_port, tuple):
            query_port = query_port[0]
        return int(self._url.port or query_port or 5432)

    @property
    def user(self) -> str:
        return self._url.username or os.environ.get("USER", "postgres")

    @property
    def password(self) -> str | None:
        return self._url.password

    @property
    def maintenance_dbname(self) -> str:
        return self._url.database or "postgres"

    def url(self, dbname: str) -> str:
        """SQLAlchemy URL of ``dbname`` on this server."""
        return self._url.set(database=dbname).render_as_string(hide_password=False)

    def connect_kwargs(self, dbname: str | None = None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {k: (v[0] if isinstance(v, tuple) else v) for k, v in self._url.query.items()}
        kwargs.update(host=self.host, port=self.port, user=self.user, dbname=dbname or self.maintenance_dbname)
        if self.password is not None:
            kwargs["password"] = self.password
        return kwargs

    def connect(self, dbname: str | None = None, **kwargs: Any):
        import psycopg

        return psycopg.connect(**self.connect_kwargs(dbname), **kwargs)

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE name [TEMPLATE template]; returns its SQLAlchemy URL."""
        from psycopg import sql

        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with self.connect(autocommit=True) as conn:
            conn.execute(query)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE IF EXISTS name WITH (FORCE), also when it is marked as a template."""
        from psycopg import sql

        with self.connect(autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                return
            ident = sql.Identifier(name)
            conn.execute(sql.SQL("ALTER DATABASE {} WITH is_template false allow_connections true").format(ident))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))

    def ensure_up(self) -> None:
        """Start the embedded server again if a test stopped (or killed) it; no-op for an external server."""
        if self.embedded is not None and not self.embedded.is_running():
            self.embedded.start(timeout=60)

    def database_exists(self, name: str) -> bool:
        with self.connect(autocommit=True) as conn:
            return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def _new_tmp_dir(prefix: str) -> Path:
    # A fresh dir directly under $TMPDIR (/tmp, mode 1777), not under pytest's 0700 basetemp: when the tests run as
    # root, the server's unprivileged OS user can reach it. Short, so the unix socket path fits.
    # 0711: the server's OS user may enter it (the tool never changes the mode of a directory it did not create)
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o711)
    return d


def _stop_quietly(pg: EmbeddedPostgres) -> None:
    """Stop a test server whatever state it is in; never raises."""
    for mode in ("fast", "immediate"):
        try:
            pg.stop(mode=mode, timeout=30)
            return
        except Exception:  # noqa: BLE001 - best effort in teardown
            continue
    pid = pg.pid()
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


def start_test_server(data_dir: Path, *, attempts: int = 5, fast: bool = True) -> EmbeddedPostgres:
    """Init and start an EmbeddedPostgres on a free 127.0.0.1 port, retrying with a new port if it was taken."""
    last: Exception | None = None
    for _ in range(attempts):
        pg = EmbeddedPostgres(data_dir, port=free_port(), fast=fast)
        pg.init()
        try:
            pg.start(timeout=60)
            return pg
        except StoreError as exc:
            if "already in use" not in str(exc) and "could not bind" not in str(exc):
                raise
            last = exc
    raise StoreError(f"could not start the test PostgreSQL on a free port after {attempts} tries: {last}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgTestServer]:
    external = os.environ.get(ENV_URL, "").strip()
    if external:
        yield PgTestServer(external)
        return
    tmp = _new_tmp_dir("attribution-pgtest-")
    pg: EmbeddedPostgres | None = None
    try:
        pg = start_test_server(tmp / "data")
        # The URL keeps working after a test restarts the server: same port, same socket.
        yield PgTestServer(pg.url("postgres"), embedded=pg, tmp_dir=tmp)
    finally:
        if pg is not None:
            _stop_quietly(pg)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template_loaders() -> list[Callable[[str], None]]:
    """Override in a conftest: callables ``loader(url)`` that build the template (e.g. Alembic upgrade head)."""
    return []


def _worker_suffix() -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"_{worker}" if worker else ""


@pytest.fixture(scope="session")
def pg_template(pg_server: PgTestServer, pg_template_loaders: list[Callable[[str], None]]) -> Iterator[str]:
    """Name of the session's template database (``attribution_test_<hex>_tmpl``), loaded once."""
    base = f"attribution_test_{uuid.uuid4().hex[:8]}{_worker_suffix()}"
    name = f"{base}_tmpl"  # pytest-postgresql's NoopExecutor derives the template name as <dbname>_tmpl
    url = pg_server.create_database(name)
    try:
        for loader in pg_template_loaders:
            loader(url)
        from psycopg import sql

        with pg_server.connect(autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            # No one may connect to the template any more, so CREATE DATABASE ... TEMPLATE never finds it busy.
            conn.execute(
                sql.SQL("ALTER DATABASE {} WITH is_template true allow_connections false").format(sql.Identifier(name))
            )
        yield name
    finally:
        with contextlib.suppress(Exception):  # best effort: a test may have broken the server
            pg_server.ensure_up()
            pg_server.drop_database(name)


@pytest.fixture
def pg_url(pg_server: PgTestServer, pg_template: str) -> Iterator[str]:
    """A fresh database copied from the template, dropped after the test; its SQLAlchemy URL."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    pg_server.ensure_up()
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield url
    finally:
        pg_server.ensure_up()
        pg_server.drop_database(name)


@pytest.fixture
def pg_engine(pg_url: str):
    from sqlalchemy import create_engine

    engine = create_engine(pg_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def embedded_factory() -> Iterator[Callable[..., EmbeddedPostgres]]:
    tmp = _new_tmp_dir("attribution-pgemb-")
    made: list[EmbeddedPostgres] = []

    def make(port: int | str | None = None, fast: bool = True, name: str = "data", **kwargs: Any) -> EmbeddedPostgres:
        pg = EmbeddedPostgres(tmp / name, port=free_port() if port == "auto" else port, fast=fast, **kwargs)  # type: ignore[arg-type]
        made.append(pg)
        return pg

    make.tmp_dir = tmp  # type: ignore[attr-defined]
    try:
        yield make
    finally:
        for pg in made:
            _stop_quietly(pg)
            sock = pg.socket_dir
            if sock != pg.data_dir:
                shutil.rmtree(sock, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


try:
    from pytest_postgresql import factories as _pgfactories
    from pytest_postgresql.executors import NoopExecutor as _NoopExecutor
except ImportError:  # pytest-postgresql is optional: pg_url/pg_engine do not need it
    pass
else:

    @pytest.fixture(scope="session")
    def pg_noproc(pg_server: PgTestServer, pg_template: str) -> _NoopExecutor:
        """pytest-postgresql executor for the test server; its template is ``pg_template``."""
        return _NoopExecutor(
            host=pg_server.host,
            port=pg_server.port,
            user=pg_server.user,
            password=pg_server.password,
            options="",
            dbname=pg_template[: -len("_tmpl")],
            maintenance_dbname=pg_server.maintenance_dbname,
        )

    #: pytest-postgresql's client fixture: a psycopg connection to a fresh copy of the template, dropped after.
    postgresql = _pgfactories.postgresql("pg_noproc")
    __all__ += ["pg_noproc", "postgresql"]
