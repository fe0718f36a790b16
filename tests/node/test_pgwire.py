"""The node's bare PostgreSQL client (node/pgwire.py) against the test harness's real server: the URL forms the
node settings take, trust / cleartext / md5 / SCRAM-SHA-256 logins (roles with passwords and pg_hba lines made
for the test), one statement with a text parameter, the server's errors with their SQLSTATE, and every wait
bounded by the deadline."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from attribution.frozen import replace
from attribution.node import pgwire


def _target(pg_url: str, **changes) -> pgwire.Target:
    u = make_url(pg_url)
    t = pgwire.parse_url(f"postgresql://{u.username}@127.0.0.1:{u.port}/{u.database}?sslmode=disable")
    return replace(t, **changes)


def _soon(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


@pytest.mark.parametrize("url, want", [
    ("postgresql://alice:s%40cret@db.example:6432/attr",
     pgwire.Target("db.example", 6432, "alice", "attr", "s@cret")),
    ("postgresql+psycopg://hooks@10.0.0.5/attribution?sslmode=require",
     pgwire.Target("10.0.0.5", 5432, "hooks", "attribution", None, "require")),
    ("postgres://hooks@/attribution?host=/run/pg&port=5433",
     pgwire.Target("/run/pg", 5433, "hooks", "attribution")),
    ("postgresql://hooks@%2Fvar%2Frun%2FPG/attribution",
     pgwire.Target("/var/run/PG", 5432, "hooks", "attribution")),
    ("postgresql://hooks@[::1]:5999/a?sslmode=verify-full&sslrootcert=/etc/ca.pem",
     pgwire.Target("::1", 5999, "hooks", "a", None, "verify-full", "/etc/ca.pem")),
    ("postgresql://hooks@/attribution", pgwire.Target(pgwire.DEFAULT_SOCKET_DIR, 5432, "hooks", "attribution")),
])
def test_the_url_forms_the_node_settings_take(url, want):
    assert pgwire.parse_url(url) == want


def test_a_password_file_wins_over_the_url_and_bad_urls_say_why():
    assert pgwire.parse_url("postgresql://u:inurl@h/d", password="fromfile").password == "fromfile"
    for url, why in (("mysql://u@h/d", "not a PostgreSQL URL"), ("postgresql://u@h/d?sslmode=maybe", "sslmode"),
                     ("postgresql://u@h/d?target_session_attrs=any", "target_session_attrs"),
                     ("postgresql://u@h1,h2/d", "several hosts")):
        with pytest.raises(ValueError, match=why):
            pgwire.parse_url(url)


def test_trust_over_tcp_runs_one_statement_with_a_text_parameter(pg_url):
    with pgwire.connect(_target(pg_url), _soon()) as c:
        assert c.query_one("SELECT $1::int + 1", "41") == "42"
        assert c.query_one("SELECT $1::text IS NULL", None) == "t"
        assert c.query_one("SELECT length($1)", "grüße\u00a0") == "6"  # UTF-8 both ways
        assert c.query_one("SELECT 1 WHERE false") is None
        assert c.parameters["server_encoding"] == "UTF8" and c.auth_method == "trust"


def test_trust_over_the_unix_socket_in_the_embedded_url_form(pg_server, pg_url):
    emb = pg_server.embedded
    db = make_url(pg_url).database
    url = f"postgresql+psycopg://{pg_server.user}@/{db}?host={emb.socket_dir}&port={emb.socket_port}"
    with pgwire.connect(pgwire.parse_url(url), _soon()) as c:
        assert c.query_one("SELECT current_user || ' ' || current_database()") == f"{pg_server.user} {db}"
        assert c.query_one("SELECT inet_server_addr() IS NULL") == "t"  # a unix socket, not TCP


def test_an_error_response_carries_its_sqlstate_and_the_session_goes_on(pg_url):
    with pgwire.connect(_target(pg_url), _soon()) as c:
        with pytest.raises(pgwire.ServerError) as e:
            c.query_one("SELECT 1 / $1::int", "0")
        assert (e.value.sqlstate, e.value.severity, e.value.message) == ("22012", "ERROR", "division by zero")
        assert e.value.permanent and not e.value.retryable
        with pytest.raises(pgwire.ServerError) as e:
            c.query_one("SELECT attribution.no_such_function($1)", "x")
        assert e.value.sqlstate == "42883" and not e.value.permanent
        assert c.query_one("SELECT 'still here'") == "still here"


def test_a_database_that_does_not_exist_is_refused_at_login(pg_url):
    with pytest.raises(pgwire.ServerError) as e:
        pgwire.connect(_target(pg_url, dbname=f"nope_{uuid.uuid4().hex[:6]}"), _soon())
    assert e.value.sqlstate == "3D000"


@contextlib.contextmanager
def password_roles(pg_server, pg_url):
    """Three login roles with passwords, each allowed in by a pg_hba line of its own method over TCP:
    cleartext (`password`), `md5` (an md5-hashed password) and `scram-sha-256`; the lines and roles go after."""
    emb = pg_server.embedded
    hba = emb.data_dir / "pg_hba.conf"
    before = hba.read_text()
    tag = uuid.uuid4().hex[:8]
    roles = {"password": (f"wire_pw_{tag}", "md5"), "md5": (f"wire_md5_{tag}", "md5"),
             "scram-sha-256": (f"wire_scram_{tag}", "scram-sha-256")}
    admin = dict(host="127.0.0.1", port=pg_server.port, user=pg_server.user, dbname="postgres", autocommit=True)
    with psycopg.connect(**admin) as c:
        for method, (role, encryption) in roles.items():
            c.execute(sql.SQL("SET password_encryption = {}").format(sql.Literal(encryption)))
            c.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                          sql.Literal(f"pw-{role}")))
    lines = "".join(f"host all {role} 127.0.0.1/32 {method}\n" for method, (role, _) in roles.items())
    hba.write_text(lines + before)
    try:
        with psycopg.connect(**admin) as c:
            c.execute("SELECT pg_reload_conf()")
        _wait_for_hba(pg_url, roles["md5"][0])
        yield {method: role for method, (role, _) in roles.items()}
    finally:
        hba.write_text(before)
        with psycopg.connect(**admin) as c:
            c.execute("SELECT pg_reload_conf()")
            for role, _ in roles.values():
                c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
                c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _wait_for_hba(pg_url: str, role: str) -> None:
    """pg_reload_conf() only signals the server: wait until a login without a password is refused."""
    until = time.monotonic() + 10
    while time.monotonic() < until:
        try:
            pgwire.connect(_target(pg_url, user=role), _soon()).close()
        except pgwire.WireError as exc:
            if "none is configured" in str(exc):
                return
        time.sleep(0.05)
    raise AssertionError("the server did not take the new pg_hba lines")


def test_cleartext_md5_and_scram_logins_with_the_right_password_and_not_the_wrong_one(pg_server, pg_url):
    with password_roles(pg_server, pg_url) as roles:
        for method, role in roles.items():
            with pgwire.connect(_target(pg_url, user=role, password=f"pw-{role}"), _soon()) as c:
                assert (c.query_one("SELECT current_user"), c.auth_method) == (role, method)
            with pytest.raises(pgwire.ServerError) as e:
                pgwire.connect(_target(pg_url, user=role, password="wrong"), _soon())
            assert e.value.sqlstate == "28P01", method  # invalid_password
            with pytest.raises(pgwire.WireError, match="none is configured"):
                pgwire.connect(_target(pg_url, user=role), _soon())
        with psycopg.connect(host="127.0.0.1", port=pg_server.port, user=pg_server.user, dbname="postgres") as c:
            stored = dict(c.execute("SELECT rolname, left(rolpassword, 3) FROM pg_authid WHERE rolname = ANY(%s)",
                                    (list(roles.values()),)).fetchall())
        assert stored == {roles["password"]: "md5", roles["md5"]: "md5", roles["scram-sha-256"]: "SCR"}


def test_a_statement_past_the_deadline_raises_in_time(pg_url):
    with pgwire.connect(_target(pg_url), _soon(0.8)) as c:
        t0 = time.monotonic()
        with pytest.raises(pgwire.WireError, match="deadline") as e:
            c.query_one("SELECT pg_sleep(5)")
        assert not isinstance(e.value, pgwire.ServerError)
        assert time.monotonic() - t0 < 1.5


def test_the_servers_own_statement_timeout_comes_back_as_its_sqlstate(pg_url):
    with pgwire.connect(_target(pg_url), _soon(), options="-c statement_timeout=200") as c:
        with pytest.raises(pgwire.ServerError) as e:
            c.query_one("SELECT pg_sleep(3)")
    assert e.value.sqlstate == "57014"  # query_canceled


def test_a_server_that_accepts_and_never_answers_and_a_closed_port_fail_within_the_deadline():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        held = []
        threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(pgwire.WireError, match="deadline|timed out"):
            pgwire.connect(pgwire.Target("127.0.0.1", port, "u", "d", sslmode="disable"), _soon(0.5))
        assert time.monotonic() - t0 < 1.0
        for conn, _ in held:
            conn.close()
    with pytest.raises(pgwire.WireError, match="refused"):
        pgwire.connect(pgwire.Target("127.0.0.1", port, "u", "d", sslmode="disable"), _soon(2))


def test_prefer_goes_on_in_plain_text_where_the_server_has_no_tls_and_require_refuses(pg_url):
    with pgwire.connect(_target(pg_url, sslmode="prefer"), _soon()) as c:
        assert c.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") == "f"
    with pytest.raises(pgwire.WireError, match="does not accept TLS"):
        pgwire.connect(_target(pg_url, sslmode="require"), _soon())
