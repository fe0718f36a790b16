"""Least privilege (migrations/versions/02_0002_roles.py, docs/security.md): the hooks' role can ingest and nothing more,
the readers' role can read the views and nothing more, the roles are made once per server even when many databases
migrate at once, and credentials never reach a log, an error message or a command line.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import errors, sql
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from attribution.config import Settings
from attribution.fleetgen import history, write_bundle
from attribution.pipeline.ingest import ingest_bundle
from attribution.store import migrate
from attribution.store.db import Target, make_engine

from tests.conftest import INCIDENTS, ROOT
from tests.harness.hooknode import BIN, Controller

pytestmark = pytest.mark.slow  # database roles, grants and migrations on real servers

WRITER, READER = "attribution_writer", "attribution_reader"
#: 0018 made a third role for the nodes' inbox, 0020 dropped it with the inbox
SUBMITTER = "attribution_submitter"
#: What ingest writes (attribution/store/writer.py); 0004 added the two rollups after 0002, 0010 the evidence kept
#: for replay, 0007 event_jobs, 0012 failed_root_series; 0019 dropped verdict_symptoms (the roles are on the verdict);
#: 0024 job_evidence_pieces (a reporter's kept lines), 0026 job_actions (the epilog and the service audit what they
#: did to jobs in Slurm).
INGEST_TABLES = {"jobs", "events", "job_events", "verdicts", "coverage", "fault_weeks",
                 "rule_packs", "fault_series", "failed_roots", "device_counters", "job_evidence", "job_evidence_pieces",
                 "event_jobs", "failed_root_series", "kueue_watch_bookmarks", "kueue_watch_attempts", "job_actions"}
UTC = timezone.utc


def _admin(pg_url: str, **kw):
    u = make_url(pg_url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database, **kw)


@contextlib.contextmanager
def login_role(pg_url: str, group: str, password: str | None = None):
    """A login role that is a member of `group`, dropped afterwards (roles belong to the whole server)."""
    name = f"hard_{group.split('_')[1][0]}_{uuid.uuid4().hex[:8]}"
    with _admin(pg_url, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(sql.Identifier(name), sql.Identifier(group)))
        if password:
            c.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(name), sql.Literal(password)))
    try:
        yield name
    finally:
        with _admin(pg_url, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
            c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _as(pg_url: str, role: str):
    return make_engine(Target(make_url(pg_url).set(username=role), False), Settings(), pool_size=1)


def _connect_as(pg_url: str, role: str):
    u = make_url(pg_url)
    return psycopg.connect(host=u.host, port=u.port, user=role, dbname=u.database, autocommit=True)


def _relations(pg_url: str) -> dict[str, str]:
    """Every relation of the schema and its kind: table, partition, view."""
    with _admin(pg_url) as c:
        rows = c.execute("SELECT c.relname, c.relkind, c.relispartition FROM pg_class c "
                         "JOIN pg_namespace n ON n.oid = c.relnamespace "
                         "WHERE n.nspname = 'attribution' AND c.relkind IN ('r', 'p', 'v', 'm')").fetchall()
    return {n: "view" if k in ("v", "m") else "partition" if part else "table" for n, k, part in rows}


def test_the_roles_are_group_roles_without_login(store):
    with store.connect() as c:
        rows = dict(c.execute(text("SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname IN (:w, :r, :s)"),
                              {"w": WRITER, "r": READER, "s": SUBMITTER}).all())
    assert rows == {WRITER: False, READER: False}


def test_a_writer_can_run_a_full_ingest(ruleset, store, pg_url, tmp_path):
    """Every path of ingest as the hooks run it: new jobs, new events in a month without a partition yet, events
    shared by two jobs, re-ingest (updates), verdict changes."""
    jobs = history(weeks=2, end=datetime(2031, 3, 3, tzinfo=UTC), seed=5, jobs_per_week=4)
    bundles = [write_bundle(j, tmp_path) for j in jobs] + [INCIDENTS / "04-xid74-nvlink", INCIDENTS / "06-ib-link-down"]
    with login_role(pg_url, WRITER) as role:
        w = _as(pg_url, role)
        try:
            for b in bundles:
                ingest_bundle(ruleset, w, b)
            for b in bundles[:3]:
                result, _ = ingest_bundle(ruleset, w, b)
                assert result.new_events == 0 and not result.verdict_changed
        finally:
            w.dispose()
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.job_verdicts")).scalar() == len(bundles)
        # the boots the evidence shows (04's contexts and kernel banners), which the writer may add, not read (0021)
        boots = set(c.execute(text("SELECT node, source FROM attribution.node_life WHERE what = 'boot'")).all())
        assert {("kes-n201", "context"), ("kes-n201", "kernel"), ("kes-n203", "context")} <= boots
        owners = c.execute(text(
            "SELECT DISTINCT pg_get_userbyid(c.relowner) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'attribution.events'::regclass")).scalars().all()
    assert role not in owners and len(owners) == 1  # partitions belong to the schema owner, not to the writer


@pytest.mark.parametrize("function,writer_may", [
    ("attribution.ensure_event_partition(timestamptz)", False),  # ingest no longer makes partitions (0006)
    ("attribution.ensure_event_partitions(integer)", True),  # the maintenance step the timer runs
])
def test_the_partition_function_runs_as_its_owner_with_a_fixed_search_path(store, function, writer_may):
    with store.connect() as c:
        secdef, config, owner = c.execute(text(
            "SELECT prosecdef, proconfig, pg_get_userbyid(proowner) FROM pg_proc "
            "WHERE oid = CAST(:f AS regprocedure)"), {"f": function}).first()
        executors = set(c.execute(text(
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END FROM pg_proc p, "
            "aclexplode(p.proacl) a WHERE p.oid = CAST(:f AS regprocedure) "
            "AND a.privilege_type = 'EXECUTE'"), {"f": function}).scalars())
    assert secdef and config == ["search_path=pg_catalog, pg_temp"]
    assert executors == ({owner, WRITER} if writer_may else {owner})  # not PUBLIC


M7_STATEMENTS = [
    "UPDATE attribution.events SET handled_at = NULL",  # would undo `drain resume`
    "UPDATE attribution.events SET handled_at = now()",  # would hide a node's evidence from the drain plan
    "UPDATE attribution.events SET evidence = 'system'",  # would launder job output
    "UPDATE attribution.verdicts SET outcome = 'none', culprit_nodes = '{}'",  # would rewrite past verdicts
    "UPDATE attribution.verdicts SET symptom_event_ids = '{}', cause_event_ids = '{}'",  # a past verdict's roles
    "UPDATE attribution.job_events SET event_time = now()",
    "UPDATE attribution.job_events SET node_key = 'elsewhere'",  # 0019: ingest updates no link
]


def test_m7_writer_cannot_update_handled_at_or_past_verdicts(ruleset, store, pg_url):
    """Column-level grants (0006): the writer may update what ingest updates (job rows, coverage, rollups) and
    nothing of stored events, links or past verdicts (the roles of a job's events are its verdict's, 0019)."""
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    with login_role(pg_url, WRITER) as role, _connect_as(pg_url, role) as c:
        for stmt in M7_STATEMENTS:
            with pytest.raises(errors.InsufficientPrivilege):
                c.execute(stmt)
        c.execute("UPDATE attribution.jobs SET evidence_seq = evidence_seq")  # what mark_pending does


DDL = [
    "CREATE TABLE attribution.evil (x int)",
    "CREATE TABLE public.evil (x int)",
    "CREATE VIEW attribution.evil AS SELECT 1",
    "CREATE FUNCTION attribution.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE INDEX evil ON attribution.events (message)",
    "ALTER TABLE attribution.jobs ADD COLUMN evil int",
    "ALTER TABLE attribution.events DETACH PARTITION attribution.{partition}",
    "DROP TABLE attribution.verdicts",
    "DROP VIEW attribution.job_verdicts",
    "DROP FUNCTION attribution.ensure_event_partition(timestamptz)",
    "TRUNCATE attribution.events",
    "TRUNCATE attribution.jobs CASCADE",
    "CREATE SCHEMA evil",
    "ALTER FUNCTION attribution.ensure_event_partition(timestamptz) SECURITY INVOKER",
]


def test_a_writer_cannot_change_the_schema_delete_or_truncate(ruleset, store, pg_url):
    ingest_bundle(ruleset, store, INCIDENTS / "06-ib-link-down")
    rels = _relations(pg_url)
    partition = sorted(n for n, k in rels.items() if k == "partition")[0]
    statements = [s.format(partition=partition) for s in DDL]
    statements += [f"DELETE FROM attribution.{t}" for t, k in sorted(rels.items())
                   if k == "table"]
    statements += [f"DELETE FROM attribution.{partition}", f"UPDATE attribution.{partition} SET message = ''"]
    refused = []
    with login_role(pg_url, WRITER) as role, _connect_as(pg_url, role) as c:
        for stmt in statements:
            with pytest.raises(errors.InsufficientPrivilege):
                try:
                    c.execute(stmt)
                except errors.InsufficientPrivilege:
                    raise
                except psycopg.Error as exc:
                    pytest.fail(f"{stmt}: {type(exc).__name__}: {exc}")
                else:
                    pytest.fail(f"the writer may run: {stmt}")
            refused.append(stmt)
        c.execute("GRANT SELECT ON attribution.jobs TO PUBLIC")  # PostgreSQL warns "no privileges were granted"
    with store.connect() as c:
        public = c.execute(text("SELECT count(*) FROM pg_class p, aclexplode(p.relacl) a "
                                "WHERE p.oid = 'attribution.jobs'::regclass AND a.grantee = 0")).scalar()
    assert public == 0, "the writer could grant what it holds"
    print(f"\nwriter refused {len(refused)} statements (DDL, DELETE on every table, TRUNCATE, GRANT, partitions)")


def test_a_writer_reads_only_what_ingest_needs(ruleset, store, pg_url):
    """SELECT on the ingest tables; nothing on the views, alembic_version or the partitions; no DELETE anywhere."""
    ingest_bundle(ruleset, store, INCIDENTS / "06-ib-link-down")
    rels = _relations(pg_url)
    with login_role(pg_url, WRITER) as role, _connect_as(pg_url, role) as c:
        readable = set()
        for name in sorted(rels):
            try:
                c.execute(sql.SQL("SELECT * FROM attribution.{} LIMIT 1").format(sql.Identifier(name)))
                readable.add(name)
            except errors.InsufficientPrivilege:
                pass
        privs = c.execute(
            "SELECT DISTINCT privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = %s AND table_schema = 'attribution'", (WRITER,)).fetchall()
        deletable = c.execute(
            "SELECT DISTINCT table_name FROM information_schema.role_table_grants "
            "WHERE grantee = %s AND table_schema = 'attribution' AND privilege_type = 'DELETE'", (WRITER,)).fetchall()
    assert readable == INGEST_TABLES & set(rels), readable ^ (INGEST_TABLES & set(rels))
    assert {p for (p,) in privs} == {"SELECT", "INSERT", "UPDATE"}
    assert deletable == []


def test_a_reader_can_select_every_view_and_write_nothing(ruleset, store, pg_url):
    ingest_bundle(ruleset, store, INCIDENTS / "04-xid74-nvlink")
    rels = _relations(pg_url)
    views = sorted(n for n, k in rels.items() if k == "view")
    tables = sorted(n for n, k in rels.items() if k != "view")
    assert {"job_verdicts", "fault_events", "node_faults_weekly", "recurring_faults", "drain_candidates"} <= set(views)
    with _admin(pg_url) as c:
        columns, readable = {}, {}
        for t, col in c.execute("SELECT table_name, column_name FROM information_schema.columns "
                                "WHERE table_schema = 'attribution'").fetchall():
            columns.setdefault(t, []).append(col)
        for t, col in c.execute("SELECT table_name, column_name FROM information_schema.column_privileges "
                                "WHERE table_schema = 'attribution' AND grantee = %s AND privilege_type = 'SELECT'",
                                (READER,)).fetchall():
            readable.setdefault(t, []).append(col)
    with login_role(pg_url, READER) as role, _connect_as(pg_url, role) as c:
        for v in views:
            c.execute(sql.SQL("SELECT * FROM attribution.{} LIMIT 5").format(sql.Identifier(v))).fetchall()
        assert c.execute("SELECT outcome FROM attribution.job_verdicts").fetchall() == [("nvlink",)]
        # the columns the views read may be read (a view runs as the reader on Citus: docs/store.md), no other
        for t in tables:
            for col in sorted(set(columns[t]) - set(readable.get(t, ()))):
                with pytest.raises(errors.InsufficientPrivilege):
                    c.execute(sql.SQL("SELECT {} FROM attribution.{} LIMIT 1").format(
                        sql.Identifier(col), sql.Identifier(t)))
            for stmt in ("DELETE FROM attribution.{}", "TRUNCATE attribution.{}",
                         "INSERT INTO attribution.{} DEFAULT VALUES"):
                with pytest.raises(errors.InsufficientPrivilege):
                    c.execute(sql.SQL(stmt).format(sql.Identifier(t)))
        for t, col in (("jobs", "context"), ("verdicts", "document"), ("events", "fields"), ("coverage", "notes")):
            assert col not in readable.get(t, ()), f"the reader can read {t}.{col}"
        for v in views:
            with pytest.raises((errors.InsufficientPrivilege, errors.ObjectNotInPrerequisiteState,
                                errors.FeatureNotSupported)):
                c.execute(sql.SQL("DELETE FROM attribution.{}").format(sql.Identifier(v)))
        with pytest.raises(errors.InsufficientPrivilege):
            c.execute("SELECT attribution.ensure_event_partition(now())")
        with pytest.raises(errors.InsufficientPrivilege):
            c.execute("CREATE TABLE attribution.evil (x int)")
    print(f"\nreader: SELECT on {len(views)} views and the columns they read; writes of {len(tables)} tables refused")


def test_downgrade_revokes_and_keeps_roles_other_databases_use(ruleset, store, pg_url):
    migrate.downgrade(store, "0001")
    with store.connect() as c:
        grants = c.execute(text("SELECT count(*) FROM information_schema.role_table_grants "
                                "WHERE grantee IN (:w, :r)"), {"w": WRITER, "r": READER}).scalar()
        roles = c.execute(text("SELECT count(*) FROM pg_roles WHERE rolname IN (:w, :r)"),
                          {"w": WRITER, "r": READER}).scalar()
        secdef = c.execute(text("SELECT prosecdef FROM pg_proc "
                                "WHERE oid = 'attribution.ensure_event_partition(timestamptz)'::regprocedure")).scalar()
    assert grants == 0 and roles == 2 and secdef is False  # the template and the other test databases use them
    migrate.upgrade(store)
    with login_role(pg_url, WRITER) as role:
        w = _as(pg_url, role)
        try:
            ingest_bundle(ruleset, w, INCIDENTS / "06-ib-link-down")
        finally:
            w.dispose()


def _upgrade(url: str) -> str:
    e = create_engine(url)
    try:
        migrate.upgrade(e)
        return migrate.current(e)
    finally:
        e.dispose()


def _downgrade(url: str) -> None:
    e = create_engine(url)
    try:
        migrate.downgrade(e, "base")
    finally:
        e.dispose()


def test_many_databases_of_one_server_migrate_at_once(embedded_factory):
    """On a server without the roles, six databases migrate concurrently: each creates the roles if missing, none
    fails. Downgrading all but one keeps the roles; downgrading the last one drops them."""
    pg = embedded_factory(port="auto")
    pg.init()
    pg.start()
    names = [f"db{i}" for i in range(6)]
    for n in names:
        pg.ensure_database(n)
    urls = [pg.url(n) for n in names]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(len(urls)) as pool:
        heads = pool.map(_upgrade, urls)
    assert set(heads) == {migrate.head()}

    def roles() -> int:
        with psycopg.connect(**pg.connect_kwargs("postgres")) as c:
            return c.execute("SELECT count(*) FROM pg_roles WHERE rolname IN (%s, %s, %s)",
                             (WRITER, READER, SUBMITTER)).fetchone()[0]

    assert roles() == 2  # 0020 dropped the inbox's role
    with ctx.Pool(len(urls) - 1) as pool:
        pool.map(_downgrade, urls[:-1])
    assert roles() == 2
    _downgrade(urls[-1])
    assert roles() == 0
    assert set(ctx.Pool(2).map(_upgrade, urls[:2])) == {migrate.head()} and roles() == 2


# -- credentials -----------------------------------------------------------------------------------------------------


class CommandLineWatch:
    """Samples every process's command line (/proc, every 50 ms, and `ps`) while the hooks run."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    with contextlib.suppress(OSError):
                        self.seen.append(Path(f"/proc/{pid}/cmdline").read_bytes())
            if n % 10 == 0:  # and what `ps` shows, now and then
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    self.seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, timeout=5).stdout)
            n += 1
            time.sleep(0.05)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def test_the_password_never_reaches_a_log_an_error_or_a_command_line(ruleset, store, pg_url, tmp_path):
    password = f"pw-{uuid.uuid4().hex}"
    with login_role(pg_url, WRITER, password=password) as role:
        secret = tmp_path / "db.password"
        secret.write_text(password + "\n")
        secret.chmod(0o600)
        u = make_url(pg_url)
        # the controller's hook: the one that writes to the database (nodes report to the service)
        node = Controller(tmp_path / "n1", f"postgresql+psycopg://{role}@{u.host}:{u.port}/{u.database}", "9301",
                          extra_config=f"  password_file: {secret}\n")
        outputs = []
        with CommandLineWatch() as watch:
            _, r = node.epilog()
            outputs += [r.stdout.encode(), r.stderr.encode()]
            # the same with the database away: the error message names the server, never the password
            node.set_url(f"postgresql+psycopg://{role}@127.0.0.1:1/{u.database}", f"  password_file: {secret}\n")
            node.job_id = "9302"
            _, r = node.epilog()
            outputs += [r.stdout.encode(), r.stderr.encode()]
            for args in (["db", "status"], ["spool", "status"]):
                r = subprocess.run([str(BIN), *args], env=node.env(), capture_output=True, timeout=60)
                outputs += [r.stdout, r.stderr]
        log = b"".join(outputs[:4])
        spooled = b"".join(p.read_bytes() for p in (node.home / "spool").glob("*.spool"))
        with store.connect() as c:
            stored = c.execute(text("SELECT count(*) FROM attribution.jobs WHERE job_id = '9301'")).scalar()
    pw = password.encode()
    assert stored == 1 and b"stored" in log and b"spooled to" in log, log
    print(f"\ncredentials: {len(watch.seen)} process listings sampled, hook log {len(log)} bytes, "
          f"{len(spooled)} spooled bytes, {sum(map(len, outputs))} bytes of command output: password in none")
    assert watch.seen and not any(pw in s for s in watch.seen), "the password was on a command line"
    assert pw not in log and pw not in spooled and not any(pw in o for o in outputs)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o620, 0o602, 0o610, 0o601])
def test_a_credentials_file_others_can_read_or_write_is_refused(tmp_path, mode):
    from attribution.config import read_secret
    from attribution.errors import ConfigError

    secret = tmp_path / "pw"
    secret.write_text("s3cret")
    secret.chmod(mode)
    with pytest.raises(ConfigError, match=f"credentials file is readable by others \\(mode {mode:04o}\\)") as err:
        read_secret(secret)
    assert "s3cret" not in str(err.value)
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_secret(tmp_path / "dir")
    for ok in (0o600, 0o400):
        secret.chmod(ok)
        assert read_secret(secret) == "s3cret"


def test_a_readable_credentials_file_is_refused_with_one_clear_line_by_the_cli_and_the_hook(tmp_path):
    """By `attribution db status` (exit 2, one line) and by the hook (it spools and says why)."""
    password = f"pw-{uuid.uuid4().hex}"
    secret = tmp_path / "pw"
    secret.write_text(password)
    secret.chmod(0o644)
    node = Controller(tmp_path / "n1", "postgresql+psycopg://writer@127.0.0.1:1/none", "9310",
                      extra_config=f"  password_file: {secret}\n")
    r = subprocess.run([str(BIN), "db", "status"], env=node.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"attribution: {secret}: credentials file is readable by others (mode 0644); "
                                f"run: chmod 600 {secret}")
    took, r = node.epilog()
    assert r.returncode == 0 and "readable by others" in r.stdout and "spooled to" in r.stdout
    assert password not in r.stdout + r.stderr


def test_docs_security_describes_the_roles():
    doc = (ROOT / "docs" / "security.md").read_text()
    for word in (WRITER, READER, "SECURITY DEFINER", "password_file", "GRANT SELECT ON", "0002"):
        assert word in doc
