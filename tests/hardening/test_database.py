"""Database trouble: a server that restarts in the middle of ingests, refuses connections, or hangs (a TCP
blackhole; a lock held by another session) is retried with bounded backoff or the report is spooled; nothing is
lost (after the database returns, `attribution spool flush` stores everything once) and the hook's budget holds.

The one hook that writes to the database is the controller's (compute nodes report to the service: nodes have no
database credentials). It is run without Slurm, as Slurm runs it: `attribution epilog` (or hooks/epilog-slurmctld)
with the controller epilog's environment and `scontrol show job` of a failed job (tests/harness/hooknode.py
Controller).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from datetime import datetime, timezone

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import attribution.store as store_pkg
from attribution.node import spool
from attribution.config import DatabaseSettings, Settings
from attribution.fleetgen import history, write_bundle
from attribution.pipeline.controller import deliver
from attribution.pipeline.intake import decode_document, ingest_document, piece_of
from attribution.pipeline.ingest import ingest
from attribution.store.db import Target, make_engine

from tests.conftest import INCIDENTS, ROOT
from tests.harness.documents import documents
from tests.harness.hooknode import BIN, BUDGET, Controller, Proxy, drop_safe_dir, safe_dir, url_via
from tests.harness.storecheck import check_consistent, snapshot

pytestmark = pytest.mark.slow  # a database that refuses, hangs or restarts, against real time budgets

UTC = timezone.utc


@pytest.fixture
def proxy(pg_url):
    url = make_url(pg_url)
    p = Proxy((url.host or "127.0.0.1", url.port or 5432))
    yield p
    p.close()


def _within_budget(took: float, what: str) -> None:
    """The hook's promise: whatever the database does, `attribution epilog` ends within its budget."""
    assert took < BUDGET, f"{what}: {took:.2f} s for a {BUDGET} s budget"


def _stored(engine, job_id: str) -> tuple[int, int, str | None]:
    with engine.connect() as c:
        return c.execute(text(
            "SELECT (SELECT count(*) FROM attribution.jobs WHERE job_id = :j), "
            "(SELECT count(*) FROM attribution.verdicts v JOIN attribution.jobs j ON j.id = v.job_ref "
            " WHERE j.job_id = :j), (SELECT outcome FROM attribution.job_verdicts WHERE job_id = :j)"),
            {"j": job_id}).first()


def _spooled_then_flushed_once(node: Controller, engine, pg_url: str, extra_config: str = "") -> None:
    assert len(node.spooled()) == 1
    assert _stored(engine, node.job_id)[0] == 0
    node.set_url(pg_url, extra_config)
    r = node.flush()
    assert r.returncode == 0 and "delivered 1," in r.stdout, r.stdout + r.stderr
    assert _stored(engine, node.job_id) == (1, 1, "gpu_hardware")
    assert "nothing to deliver" in node.flush().stdout
    assert _stored(engine, node.job_id) == (1, 1, "gpu_hardware")


@pytest.mark.slow
def test_refused_connections_spool_within_the_budget_then_flush_stores_once(tmp_path, pg_url, proxy):
    engine = create_engine(pg_url)
    node = Controller(tmp_path / "n1", url_via(pg_url, proxy.port), "9101")  # nothing listens there
    took, r = node.epilog()
    print(f"\nrefused: `attribution epilog` took {took:.2f} s of its {BUDGET} s budget: {r.stdout.strip()}")
    assert r.returncode == 0 and "spooled to" in r.stdout and "Connection refused" in r.stdout, r.stdout + r.stderr
    _spooled_then_flushed_once(node, engine, pg_url)
    engine.dispose()
    _within_budget(took, "refused")


def test_a_blackhole_that_accepts_and_never_answers_spools_within_the_budget(tmp_path, pg_url, proxy):
    engine = create_engine(pg_url)
    proxy.set("blackhole")
    node = Controller(tmp_path / "n1", url_via(pg_url, proxy.port), "9102")
    took, r = node.epilog()
    print(f"\nblackhole: `attribution epilog` took {took:.2f} s of its {BUDGET} s budget: {r.stdout.strip()}")
    assert r.returncode == 0 and "spooled to" in r.stdout and "timeout" in r.stdout, r.stdout + r.stderr
    assert len(node.spooled()) == 1
    proxy.set("forward")  # the database is back, behind the same address
    node.set_url(url_via(pg_url, proxy.port))
    r = node.flush()
    assert r.returncode == 0 and "delivered 1," in r.stdout, r.stdout + r.stderr
    assert _stored(engine, node.job_id) == (1, 1, "gpu_hardware")
    assert "nothing to deliver" in node.flush().stdout and _stored(engine, node.job_id)[1] == 1
    engine.dispose()
    _within_budget(took, "blackhole")


@contextlib.contextmanager
def _holding(pg_url: str, sql: str):
    import psycopg

    u = make_url(pg_url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, dbname=u.database) as conn:
        conn.execute(sql)
        yield conn  # the transaction stays open (and the lock held) until the block ends


LOCKS = {
    "job advisory lock (a hung ingest of the same job)":
        "SELECT pg_advisory_xact_lock(hashtextextended('attribution.job/hard/{job}', 0))",
    "table lock (a migration waiting on the jobs table)": "LOCK TABLE attribution.jobs IN ACCESS EXCLUSIVE MODE",
}


@pytest.mark.parametrize("what", sorted(LOCKS))
def test_a_lock_held_by_another_session_times_out_and_spools_within_the_budget(tmp_path, pg_url, what):
    engine = create_engine(pg_url)
    job = str(9103 + sorted(LOCKS).index(what))
    node = Controller(tmp_path / "n1", pg_url, job)
    with _holding(pg_url, LOCKS[what].format(job=job)):
        took, r = node.epilog()
    print(f"\nlock held ({what}): `attribution epilog` took {took:.2f} s of its {BUDGET} s budget: "
          f"{r.stdout.strip()}")
    assert r.returncode == 0 and "spooled to" in r.stdout and "timeout" in r.stdout, r.stdout + r.stderr
    _spooled_then_flushed_once(node, engine, pg_url)
    engine.dispose()
    _within_budget(took, what)


def test_a_lock_wait_longer_than_half_the_budget_is_not_lost(tmp_path, pg_url):
    """Budget 12 s, lock_timeout 6.5 s (both operator settings), another session holding the job's lock: attempt 1
    times out at start-up + 6.5 s; the retry must not run a whole lock timeout past the deadline (once it did, the
    hook's `timeout 12` killed `attribution epilog` and nothing was stored or spooled). hooks/epilog-slurmctld as
    slurmctld runs it."""
    job = "9110"
    node = Controller(tmp_path / "n1", pg_url, job, extra_config="  lock_timeout_ms: 6500\n")
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ncat {node.scontrol}\n")
    scontrol.chmod(0o755)
    etc = safe_dir()
    try:
        (etc / "hook.env").write_text(f"ATTRIBUTION_CTLD_BIN={BIN}\nATTRIBUTION_BUDGET=12\n"
                                      f"ATTRIBUTION_SCONTROL={scontrol}\nATTRIBUTION_CONFIG={node.config}\n"
                                      f"ATTRIBUTION_LOG={node.base}/hooks.log\n")
        env = {k: v for k, v in node.env().items() if k.startswith("SLURM")} | {"ATTRIBUTION_HOOK_ENV":
                                                                                  str(etc / "hook.env")}
        with _holding(pg_url, LOCKS["job advisory lock (a hung ingest of the same job)"].format(job=job)):
            t0 = time.monotonic()
            r = __import__("subprocess").run([str(ROOT / "hooks" / "epilog-slurmctld")], env=env,
                                             capture_output=True, text=True, timeout=60)
            took = time.monotonic() - t0
    finally:
        drop_safe_dir(etc)
    log = (node.base / "hooks.log").read_text() if (node.base / "hooks.log").exists() else ""
    print(f"\nhooks/epilog-slurmctld with a 6.5 s lock timeout and a 12 s budget: {took:.2f} s; log: {log.strip()}")
    assert r.returncode == 0 and took < 12
    assert node.spooled(), f"the report was lost: nothing spooled, nothing stored ({log.strip()})"


# -- the server restarts while ingests run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def payloads(tmp_path_factory, ruleset):
    """Every report of a week of generated jobs and two incidents, as their reporters send them."""
    out = tmp_path_factory.mktemp("restart-bundles")
    jobs = history(weeks=1, end=datetime(2026, 6, 15, tzinfo=UTC), seed=11, jobs_per_week=12)
    paths = [write_bundle(j, out) for j in jobs]
    paths += [INCIDENTS / "04-xid74-nvlink", INCIDENTS / "01-xid79-fallen-off-bus"]
    return [doc for p in paths for doc in documents(ruleset, p)]


def test_a_server_restart_in_the_middle_of_ingests_is_retried_or_spooled_and_nothing_is_lost(
        ruleset, payloads, pg_url, pg_server, pg_template, tmp_path, monkeypatch):
    if pg_server.embedded is None:
        pytest.skip("needs the embedded test server (it is restarted)")
    # the reference: one clean ingest of everything
    ref_engine = create_engine(pg_url)
    for doc in payloads:
        ingest_document(ruleset, ref_engine, decode_document(doc))
    reference = snapshot(ref_engine)
    ref_engine.dispose()

    retries = []
    real = store_pkg._retryable
    monkeypatch.setattr(store_pkg, "_retryable", lambda exc: retries.append(type(exc).__name__) or real(exc))
    name = f"restart_{uuid.uuid4().hex[:10]}"
    url = pg_server.create_database(name, template=pg_template)
    settings = Settings(home=tmp_path / "home", database=DatabaseSettings(url=url, connect_timeout=2))

    @contextlib.contextmanager
    def factory():
        engine = make_engine(Target(make_url(url), False), settings, pool_size=1)
        try:
            yield engine
        finally:
            engine.dispose()

    results: list[tuple[str, float]] = []
    restarted = threading.Event()

    def worker():
        """What the controller's hook does with each report: spooled first, then the spool delivered."""
        rounds = 0
        while rounds < 3 or not restarted.is_set():
            for doc in payloads:
                t0 = time.monotonic()
                path = spool.write(settings.spool, doc)
                try:
                    deliver(ruleset, settings, factory, time.monotonic() + BUDGET)
                except Exception:
                    pass
                results.append(("spooled" if path.exists() else "stored", time.monotonic() - t0))
            rounds += 1

    t = threading.Thread(target=worker)
    t.start()
    while len(results) < len(payloads) // 2:
        time.sleep(0.01)
    t0 = time.monotonic()
    pg_server.embedded.restart()
    restart_took = time.monotonic() - t0
    restarted.set()
    t.join(timeout=300)
    engine = create_engine(url)
    try:
        spooled = len(spool.pending(settings.spool))
        res = spool.flush(settings.spool, lambda d: ingest_document(ruleset, engine, decode_document(d)))
        assert res.error is None and res.bad == [] and res.replayed == spooled
        check_consistent(engine, reference)
        assert snapshot(engine) == reference, "something was lost or stored twice across the restart"
    finally:
        engine.dispose()
        pg_server.drop_database(name)
    worst = max(s for _, s in results)
    print(f"\nserver restart ({restart_took:.2f} s) during {len(results)} ingests: "
          f"{sum(1 for r, _ in results if r == 'stored')} stored, {spooled} spooled (replayed once by flush), "
          f"{len(retries)} retried attempt(s) {sorted(set(retries))}; slowest call {worst:.2f} s (budget {BUDGET} s)")
    assert not any(r == "lost" for r, _ in results)
    assert retries or spooled, "the restart did not hit any ingest"
    assert worst < BUDGET


def test_a_database_that_refuses_for_good_makes_ingest_give_up_with_bounded_backoff(ruleset, payloads, proxy):
    """pipeline.ingest (what `attribution ingest` runs) retries a refused connection a bounded number of times with
    exponential backoff, then raises StoreError: about 3 s, not forever."""
    from attribution.errors import StoreError

    url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/none"
    engine = make_engine(Target(make_url(url), False), Settings(database=DatabaseSettings(connect_timeout=2)))
    d = piece_of(ruleset, decode_document(payloads[0]))
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="gave up after 5 attempt"):
        ingest(ruleset, engine, d.context, list(d.events), list(d.coverage), "bundle")
    took = time.monotonic() - t0
    engine.dispose()
    print(f"\nrefused for good: ingest gave up after {took:.2f} s (5 attempts, backoff 0.1 s doubling, jitter)")
    assert 0.5 < took < 10


def test_m2_a_database_that_stops_answering_mid_transaction_spools_within_the_budget(tmp_path, pg_url, proxy):
    """A proxy that keeps the connection but stops forwarding once the ingest has taken the job's lock: no server
    timeout can fire (the server never gets the statement). The hook's own deadline severs the connection and
    spools within the budget; the server ends the session it left idle in transaction (and its lock)."""
    engine = create_engine(pg_url)
    proxy.set("forward")
    proxy.stall_marker = b"_in_events"  # the ingest's first statement after it locked the job
    node = Controller(tmp_path / "n1", url_via(pg_url, proxy.port), "9120",
                      extra_config="  idle_in_transaction_timeout_ms: 1000\n")
    took, r = node.epilog()
    print(f"\nstalled mid-transaction: `attribution epilog` took {took:.2f} s of its {BUDGET} s budget: "
          f"{r.stdout.strip()}")
    assert r.returncode == 0 and "spooled to" in r.stdout, r.stdout + r.stderr
    assert len(node.spooled()) == 1
    _within_budget(took, "stalled")
    lock = "attribution.job/hard/9120"
    t_end = time.monotonic() + 60
    while True:  # the server's idle_in_transaction_session_timeout releases the job's lock
        with engine.connect() as c:
            held = c.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                                  "((classid::bigint << 32) | objid::bigint) = (hashtextextended(:k, 0) & "
                                  "x'ffffffffffffffff'::bigint)"), {"k": lock}).scalar()
        if held == 0 or time.monotonic() > t_end:
            break
        time.sleep(0.2)
    assert held == 0, "the stalled session still holds the job's lock"
    proxy.stall_marker = None
    node.set_url(pg_url)
    r = node.flush()
    assert r.returncode == 0 and "delivered 1," in r.stdout, r.stdout + r.stderr
    engine.dispose()
