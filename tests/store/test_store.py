"""The store on a real PostgreSQL: idempotent ingest, any-order pieces, deduplication across jobs, concurrency,
migrations, and the fleet views on a generated history (exact rows)."""

from __future__ import annotations

import multiprocessing
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from attribution.collect.bundle import collect_bundle
from attribution.fleetgen import ECC_GPU, ECC_NODE, NVLINK_GPU, NVLINK_NODE, history, write_bundle
from attribution.pipeline.diagnose import diagnose_bundle
from attribution.pipeline.ingest import ingest, ingest_bundle
from attribution.reports.render import verdict_to_dict
from attribution.rulepack.load import load_rules
from attribution.scope.bundle import load_context
from attribution.store import migrate

from tests.conftest import INCIDENTS, ROOT

UTC = timezone.utc
TABLES = ("jobs", "events", "job_events", "verdicts", "coverage", "fault_weeks")


def counts(engine) -> dict[str, int]:
    with engine.connect() as c:
        return {t: c.execute(text(f"SELECT count(*) FROM attribution.{t}")).scalar() for t in TABLES}


def all_bundles():
    return sorted(p for p in INCIDENTS.iterdir() if (p / "context.yaml").is_file())


def current_document(engine, cluster: str, job_id: str) -> dict:
    with engine.connect() as c:
        return c.execute(text(
            "SELECT v.document FROM attribution.jobs j JOIN attribution.verdicts v ON v.job_id = j.job_id "
            "AND v.id = j.current_verdict_id "
            "WHERE j.cluster = :c AND j.job_id = :j"), {"c": cluster, "j": job_id}).scalar_one()


def test_ingesting_every_incident_twice_adds_nothing_the_second_time(ruleset, store):
    for b in all_bundles():
        ingest_bundle(ruleset, store, b)
    first = counts(store)
    for b in all_bundles():
        result, _ = ingest_bundle(ruleset, store, b)
        assert result.new_events == 0 and result.linked_events == 0 and not result.verdict_changed
    assert counts(store) == first
    assert first["jobs"] == 12 and first["verdicts"] == 12


def test_job_verdicts_view_shows_each_expected_outcome(ruleset, store):
    expected = {}
    for b in all_bundles():
        ingest_bundle(ruleset, store, b)
        ctx = yaml.safe_load((b / "context.yaml").read_text())
        exp = yaml.safe_load((b / "expected.yaml").read_text())
        expected[(ctx["cluster"], str(ctx["job_id"]))] = (exp["outcome"], sorted(exp["culprits"]),
                                                          (exp.get("root_cause") or {}).get("kind"))
    with store.connect() as c:
        rows = c.execute(text("SELECT cluster, job_id, outcome, culprit_nodes, root_kind, job_start, verdict_at "
                              "FROM attribution.job_verdicts")).all()
    got = {(r[0], r[1]): (r[2], sorted(r[3]), r[4]) for r in rows}
    assert got == expected
    assert all(r[5] is not None and r[6] is not None for r in rows)


def _two_overlapping_jobs(tmp_path: Path) -> tuple[Path, Path]:
    """Two jobs on the same node whose windows overlap, both bundles carrying the same kernel line."""
    line = ("[Tue Mar 10 09:14:37 2026] NVRM: Xid (PCI:0000:9d:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.\n")
    out = []
    for job, (start, end) in {"11": ("08:00", "09:30"), "12": ("09:00", "10:00")}.items():
        b = tmp_path / job
        (b / "nodes" / "g01").mkdir(parents=True)
        (b / "nodes" / "g01" / "kernel.log").write_text("[Tue Mar 10 07:59:00 2026] boot noise\n" + line)
        (b / "job").mkdir()
        (b / "job" / "out").write_text("")
        (b / "context.yaml").write_text(yaml.safe_dump({
            "cluster": "c", "job_id": job, "nodes": ["g01"], "state": "FAILED",
            "start": f"2026-03-10T{start}:00Z", "end": f"2026-03-10T{end}:00Z"}))
        out.append(b)
    return out[0], out[1]


def test_a_kernel_line_seen_by_two_jobs_is_one_event_linked_to_both(ruleset, store, tmp_path):
    a, b = _two_overlapping_jobs(tmp_path)
    ingest_bundle(ruleset, store, a)
    ingest_bundle(ruleset, store, b)
    with store.connect() as c:
        rows = c.execute(text("SELECT kind, node, jobs FROM attribution.fault_events WHERE kind = 'gpu_fallen_off_bus'"
                              )).all()
        weekly = c.execute(text("SELECT events, jobs_failed FROM attribution.node_faults_weekly "
                                "WHERE kind = 'gpu_fallen_off_bus'")).all()
    assert rows == [("gpu_fallen_off_bus", "g01", 2)]
    assert weekly == [(1, 2)]  # one event, two failed jobs blamed on it


def _pieces(ruleset, bundle: Path):
    """What the hooks would send separately: each node's own logs (node epilogs, provisional context, state
    unknown, start from a prolog stamp a few seconds late) and the job output with the final context (controller)."""
    ctx = load_context(bundle / "context.yaml")
    d = diagnose_bundle(ruleset, bundle)
    node_ctx = type(ctx)(cluster=ctx.cluster, job_id=ctx.job_id, nodes=ctx.nodes, state="UNKNOWN",
                         start=ctx.start + timedelta(seconds=3), end=ctx.end + timedelta(seconds=1),
                         boot_time=ctx.boot_time, timezone=ctx.timezone)
    pieces = []
    for node in ctx.nodes:
        evs = [e for e in d.events if e.node == node and e.source in ("kernel", "fabricmanager", "node")]
        cov = [c for c in d.coverage if c.node == node and c.source in ("kernel", "fabricmanager", "node")]
        pieces.append((node_ctx, evs, cov, "node"))
    evs = [e for e in d.events if e.source in ("job", "scheduler")]
    cov = [c for c in d.coverage if c.source == "job"]
    pieces.append((ctx, evs, cov, "controller"))
    return pieces


@pytest.mark.parametrize("order", ["nodes-first", "controller-first", "interleaved"])
def test_pieces_in_any_order_end_with_the_whole_bundle_verdict(ruleset, store, order):
    bundle = INCIDENTS / "04-xid74-nvlink"
    whole = verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)
    pieces = _pieces(ruleset, bundle)
    if order == "controller-first":
        pieces = pieces[-1:] + pieces[:-1]
    elif order == "interleaved":
        pieces = pieces[1:3] + pieces[-1:] + pieces[:1] + pieces[3:-1]
    for ctx, evs, cov, source in pieces:
        ingest(ruleset, store, ctx, evs, cov, source)
    doc = current_document(store, "kestrel", "90417")
    assert doc == whole
    assert counts(store)["jobs"] == 1


def test_pieces_stored_without_attributing_are_attributed_whole_by_the_last_one(ruleset, store):
    """What the service does with a burst of one job's reports: each but the last stores only (attribute=False:
    no verdict, the job pending); the last attributes everything stored, once."""
    bundle = INCIDENTS / "04-xid74-nvlink"
    whole = verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)
    pieces = _pieces(ruleset, bundle)
    *first, last = pieces
    for ctx, evs, cov, source in first:
        result, verdict = ingest(ruleset, store, ctx, evs, cov, source, attribute=False)
        assert verdict is None and result.verdict_id is None
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.verdicts")).scalar() == 0
    result, verdict = ingest(ruleset, store, *last)
    assert verdict is not None and current_document(store, "kestrel", "90417") == whole
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.verdicts")).scalar() == 1


def test_evidence_stored_by_a_process_that_died_before_attributing_gets_its_verdict(ruleset, store, pg_url,
                                                                                      tmp_path):
    """Evidence committed while another process was attributing the job is only marked pending; if its process is
    killed before it attributes, `attribution db attribute-pending` (a timer) computes the verdict."""
    from click.testing import CliRunner

    from attribution.cli import main
    from attribution.store.writer import JobSession

    bundle = INCIDENTS / "04-xid74-nvlink"
    whole = verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)
    *nodes, (ctx, evs, cov, source) = _pieces(ruleset, bundle)
    for piece in nodes:
        ingest(ruleset, store, *piece)
    with store.begin() as conn:  # what the killed process got done: its evidence stored and marked pending
        s = JobSession(conn, ctx, source)
        s.add_events(evs)
        s.set_coverage(cov)
        s.mark_pending()
    assert current_document(store, "kestrel", "90417") != whole
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {pg_url}\n")
    r = CliRunner().invoke(main, ["--config", str(cfg), "db", "attribute-pending"])
    assert r.exit_code == 0, r.output
    assert "attributed 1 pending job(s)" in r.output
    assert current_document(store, "kestrel", "90417") == whole
    again = CliRunner().invoke(main, ["--config", str(cfg), "db", "attribute-pending"])
    assert "attributed 0 pending job(s)" in again.output


def test_the_verdict_history_keeps_every_change(ruleset, store):
    pieces = _pieces(ruleset, INCIDENTS / "01-xid79-fallen-off-bus")
    for ctx, evs, cov, source in pieces:
        ingest(ruleset, store, ctx, evs, cov, source)
    with store.connect() as c:
        outcomes = [r[0] for r in c.execute(text("SELECT outcome FROM attribution.verdicts ORDER BY id"))]
    assert outcomes[-1] == "gpu_hardware"
    assert len(outcomes) >= 2  # an earlier, partial verdict is kept as history


def _ingest_piece(args):
    url, rules_dir, piece_index, bundle = args
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.db import Target, make_engine

    rs = load_rules(rules_dir)
    engine = make_engine(Target(make_url(url), False), Settings(), pool_size=1)
    try:
        pieces = _pieces(rs, Path(bundle))
        ctx, evs, cov, source = pieces[piece_index % len(pieces)]
        ingest(rs, engine, ctx, evs, cov, source)
        return None
    except Exception as exc:  # reported to the parent, which fails the test
        return repr(exc)
    finally:
        engine.dispose()


@pytest.mark.slow
def test_64_concurrent_ingests_of_one_job(ruleset, store, pg_url):
    bundle = INCIDENTS / "02-xid48-dbe-ecc-xid31"
    n_pieces = len(_pieces(ruleset, bundle))
    jobs = [(pg_url, str(ROOT / "rules"), i, str(bundle)) for i in range(64)]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(16) as pool:
        errors = [e for e in pool.map(_ingest_piece, jobs) if e]
    assert errors == []
    assert 64 > n_pieces  # every piece was sent several times
    whole = verdict_to_dict(diagnose_bundle(ruleset, bundle).verdict)
    assert current_document(store, "tethys", "418833") == whole
    c = counts(store)
    d = diagnose_bundle(ruleset, bundle)
    assert c["jobs"] == 1
    with store.connect() as conn:
        dup = conn.execute(text("SELECT count(*) FROM (SELECT fingerprint FROM attribution.events "
                                "GROUP BY fingerprint, occurred_at HAVING count(*) > 1) x")).scalar()
    assert dup == 0
    # a boot (the kernel's banner, a kind with `life: boot`) is kept in the node's life, not as an event (#31)
    assert c["events"] == len({(e.rule, e.location, e.kind) for e in d.events if not ruleset.kinds[e.kind].life})


@pytest.mark.slow
def test_generated_history_shows_in_the_fleet_views_exactly(ruleset, store, tmp_path):
    end = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    jobs = history(weeks=8, end=end)
    for j in jobs:
        ingest_bundle(ruleset, store, write_bundle(j, tmp_path))
    with store.connect() as c:
        recurring = c.execute(text(
            "SELECT cluster, node, gpu, kind, code, weeks, events, jobs_failed FROM attribution.recurring_faults "
            "ORDER BY node")).all()
        weekly = c.execute(text(
            "SELECT node, week, kind, code, events, jobs_failed FROM attribution.node_faults_weekly "
            "WHERE node IN (:a, :b) ORDER BY node, week"), {"a": NVLINK_NODE, "b": ECC_NODE}).all()
        outcomes = dict(c.execute(text("SELECT job_id, outcome FROM attribution.job_verdicts")).all())
    assert recurring == [
        ("demo", NVLINK_NODE, NVLINK_GPU, "nvlink_error", 74, 5, 5, 5),
        ("demo", ECC_NODE, ECC_GPU, "gpu_ecc_dbe", 48, 3, 3, 3),
    ]
    nv = [w for w in weekly if w[0] == NVLINK_NODE]
    ecc = [w for w in weekly if w[0] == ECC_NODE]
    assert [(k, code, n, f) for _, _, k, code, n, f in nv] == [("nvlink_error", 74, 1, 1)] * 5
    assert [(k, code, n, f) for _, _, k, code, n, f in ecc] == [("gpu_ecc_dbe", 48, 1, 1)] * 3
    assert all(w[1].weekday() == 0 for w in weekly)  # ISO weeks start on Monday
    assert len({w[1] for w in nv}) == 5
    assert {j.job_id: j.story for j in jobs} == outcomes


def test_alembic_models_and_migrations_agree(store):
    migrate.check(store)  # raises when autogenerate would find a difference


def test_downgrade_and_upgrade_round_trip(ruleset, store):
    ingest_bundle(ruleset, store, INCIDENTS / "06-ib-link-down")
    migrate.downgrade(store, "base")
    with store.connect() as c:
        left = c.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'attribution' "
                              "AND tablename <> 'alembic_version'")).scalar()
    assert left == 0
    migrate.upgrade(store)
    assert migrate.current(store) == migrate.head()
    ingest_bundle(ruleset, store, INCIDENTS / "06-ib-link-down")
    assert counts(store)["verdicts"] == 1


def test_context_precedence_migration_renames_the_column_and_back(store):
    """0016 renames jobs.context_rank (which context source wins, not an MPI rank) to context_precedence; its
    downgrade renames it back, with the values kept."""
    def columns():
        with store.connect() as c:
            return {r[0] for r in c.execute(text(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'attribution' "
                "AND table_name = 'jobs' AND column_name IN ('context_rank', 'context_precedence')"))}

    assert columns() == {"context_precedence"}
    migrate.downgrade(store, "0015")
    try:
        assert columns() == {"context_rank"}
    finally:
        migrate.upgrade(store)
    assert columns() == {"context_precedence"}
    assert migrate.current(store) == migrate.head()


def test_upgrade_from_many_hosts_at_once(pg_url):
    """Concurrent `db upgrade` of an already-migrated database: everyone waits for the advisory lock, no error."""
    from sqlalchemy import create_engine

    engines = [create_engine(pg_url) for _ in range(4)]
    ctx = multiprocessing.get_context("fork")
    try:
        with ctx.Pool(4) as pool:
            pool.map(_upgrade, [pg_url] * 8)
        assert migrate.current(engines[0]) == migrate.head()
    finally:
        for e in engines:
            e.dispose()


def _upgrade(url):
    from sqlalchemy import create_engine

    e = create_engine(url)
    try:
        migrate.upgrade(e)
    finally:
        e.dispose()


def test_events_outside_the_job_window_are_stored_but_not_linked(ruleset, store):
    ingest_bundle(ruleset, store, INCIDENTS / "09-slurm-timeout-no-fault")
    with store.connect() as c:
        rows = c.execute(text("SELECT node, code, jobs, rule FROM attribution.fault_events "
                              "WHERE kind = 'gpu_fallen_off_bus' ORDER BY rule")).all()
    # the Xid 79 line and the "GPU has fallen off the bus" line, nine minutes after the job: stored, not linked
    assert rows == [("sag-g3", 79, 0, "kernel.gpu_fallen_off_bus_text"), ("sag-g3", 79, 0, "kernel.xid")]


def test_views_sql_files_are_the_ones_the_migrations_apply():
    """sql/ holds the readable definitions; each is identical to the newest migration's version of it (a
    migrations/sql/NNNN folder holds the views that revision created or changed). Newest in the chain of
    revisions, which is not the order of their numbers (0008 follows 0011, 0007 follows 0010)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    chain = [r.revision for r in reversed(list(script.walk_revisions()))]
    folders = {p.name: p for p in (ROOT / "migrations" / "sql").iterdir()}
    assert set(folders) <= set(chain)
    shipped = {p.name: p.read_text() for p in (ROOT / "sql").glob("*.sql")}
    applied = {}
    for revision in chain:
        if revision in folders:
            applied.update({p.name: p.read_text() for p in folders[revision].glob("*.sql")})
    assert shipped == applied


def test_collect_bundle_is_not_needed_for_reattribution(ruleset, store):
    """A job is re-attributed from the stored events alone (its files may be gone)."""
    b = INCIDENTS / "05-nvswitch-fatal-sxid"
    ctx = load_context(b / "context.yaml")
    obs, cov = collect_bundle(b, ctx, ruleset.prefilter)
    assert obs
    _, v1 = ingest_bundle(ruleset, store, b)
    _, v2 = ingest(ruleset, store, ctx, [], [], "bundle")
    assert verdict_to_dict(v1) == verdict_to_dict(v2)


@pytest.mark.slow
def test_partitions_are_made_ahead_and_ingest_makes_none(ruleset, store, tmp_path):
    """The migration makes this month's partition, the next 12 and a default one; ingesting history of other
    months adds none (their rows go to the default partition), and the maintenance step is idempotent."""
    from attribution.store import make_partitions_ahead

    def parts():
        with store.connect() as c:
            return [r[0] for r in c.execute(text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'events' ORDER BY 1"))]

    now = datetime.now(UTC)
    months = [(now.year + (now.month - 1 + k) // 12, (now.month - 1 + k) % 12 + 1) for k in range(13)]
    expected = ["events_default"] + [f"events_p{y:04d}{m:02d}" for y, m in months]
    assert parts() == expected
    jobs = history(weeks=10, end=datetime(2026, 6, 15, tzinfo=UTC), jobs_per_week=2)
    for j in jobs:
        ingest_bundle(ruleset, store, write_bundle(j, tmp_path))
    assert parts() == expected
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.events_default")).scalar() > 0
    assert make_partitions_ahead(store) == 0


def test_copy_of_sql_folder(tmp_path):
    """Every view of docs/store.md has its readable file in sql/."""
    names = {p.stem.split("_", 1)[1] for p in (ROOT / "sql").glob("*.sql")}
    assert {"job_verdicts", "fault_events", "node_faults_weekly", "recurring_faults", "drain_candidates"} <= names
    shutil.rmtree(tmp_path)


@pytest.mark.slow
def test_rollups_equal_a_recount_from_the_raw_tables(ruleset, store, tmp_path):
    """fault_weeks, fault_series, failed_roots and failed_root_series, kept incrementally at ingest, equal what a
    full recount of events and current verdicts gives, also after verdicts changed (pieces arriving in several
    ingests)."""
    for j in history(weeks=6, end=datetime(2026, 11, 27, tzinfo=UTC)):
        ingest_bundle(ruleset, store, write_bundle(j, tmp_path))
    for ctx, evs, cov, source in _pieces(ruleset, INCIDENTS / "01-xid79-fallen-off-bus"):
        ingest(ruleset, store, ctx, evs, cov, source)
    with store.connect() as c:
        weeks_vs_series = c.execute(text("""
            SELECT count(*) FROM (
              SELECT cluster, node, gpu_key, kind, code_key, sum(events) AS e, count(*) AS w,
                     min(first_seen) AS f, max(last_seen) AS l FROM attribution.fault_weeks GROUP BY 1, 2, 3, 4, 5
              EXCEPT
              SELECT cluster, node, gpu_key, kind, code_key, events, weeks, first_seen, last_seen
              FROM attribution.fault_series) x""")).scalar()
        weeks_vs_events = c.execute(text("""
            SELECT count(*) FROM (
              SELECT cluster, node, coalesce(gpu, ''), kind, coalesce(code, -1),
                     (date_trunc('week', occurred_at AT TIME ZONE 'UTC'))::date, count(*)
              FROM attribution.events
              WHERE node IS NOT NULL AND ((source NOT IN ('job', 'scheduler') AND role <> 'symptom'
                    AND coalesce(outcome, '') <> 'application') OR (role = 'cause' AND outcome IN
                    ('gpu_hardware', 'nvlink', 'nvswitch_fabric', 'network', 'host')))
              GROUP BY 1, 2, 3, 4, 5, 6
              EXCEPT SELECT cluster, node, gpu_key, kind, code_key, week, events FROM attribution.fault_weeks) x"""
                                          )).scalar()
        roots = c.execute(text("""
            SELECT count(*) FROM (
              (SELECT j.cluster, v.root_node, coalesce(v.root_gpu, ''), v.root_kind, coalesce(v.root_code, -1),
                      (date_trunc('week', coalesce(v.root_time, j.end_time) AT TIME ZONE 'UTC'))::date, count(*)::int
               FROM attribution.jobs j JOIN attribution.verdicts v ON v.id = j.current_verdict_id
               WHERE v.root_node IS NOT NULL AND v.outcome IN ('gpu_hardware', 'nvlink', 'nvswitch_fabric',
                     'network', 'host') GROUP BY 1, 2, 3, 4, 5, 6)
              EXCEPT SELECT cluster, node, gpu_key, kind, code_key, week, jobs FROM attribution.failed_roots
                     WHERE jobs <> 0) x""")).scalar()
        weeks_of_roots = ("SELECT cluster, node, gpu_key, kind, code_key, sum(jobs)::int FROM attribution.failed_roots "
                          "GROUP BY 1, 2, 3, 4, 5 HAVING sum(jobs) <> 0")
        series_of_roots = ("SELECT cluster, node, gpu_key, kind, code_key, jobs FROM attribution.failed_root_series "
                           "WHERE jobs <> 0")
        root_series = c.execute(text(
            f"SELECT count(*) FROM (({weeks_of_roots}) EXCEPT ({series_of_roots})) a")).scalar() + c.execute(text(
            f"SELECT count(*) FROM (({series_of_roots}) EXCEPT ({weeks_of_roots})) b")).scalar()
        assert c.execute(text("SELECT count(*) FROM attribution.failed_root_series WHERE jobs > 0")).scalar() > 0
        assert c.execute(text("SELECT count(*) FROM attribution.fault_series")).scalar() > 0
    assert (weeks_vs_series, weeks_vs_events, roots, root_series) == (0, 0, 0, 0)


#: An event's role in its job (docs/store.md "Roles of a job's events"): the current verdict's.
ROLES = """
SELECT e.kind, e.node, CASE WHEN je.event_id = v.root_event_id THEN 'root_cause'
                            WHEN je.event_id = ANY (v.cause_event_ids) THEN 'cause'
                            WHEN je.event_id = ANY (v.symptom_event_ids) THEN 'symptom'
                            ELSE 'unattributed' END AS role_in_job, je.event_id
FROM attribution.jobs j
JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id
JOIN attribution.job_events je ON je.job_id = j.job_id AND je.job_ref = j.id
JOIN attribution.events e ON e.node_key = je.node_key AND e.id = je.event_id
WHERE j.cluster = :c AND j.job_id = :j"""


def test_the_verdict_says_each_events_role_in_its_job(ruleset, store):
    """Incident 01: the Xid 79 line is the root cause, the NCCL watchdogs and the Xid 45 teardown are its symptoms
    (expected.yaml's notes), and as many links are symptoms as the verdict lists."""
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    ctx = yaml.safe_load((INCIDENTS / "01-xid79-fallen-off-bus" / "context.yaml").read_text())
    with store.connect() as c:
        rows = c.execute(text(ROLES), {"c": ctx["cluster"], "j": str(ctx["job_id"])}).all()
    doc = current_document(store, ctx["cluster"], str(ctx["job_id"]))
    roots = [(k, n) for k, n, role, _ in rows if role == "root_cause"]
    assert roots == [("gpu_fallen_off_bus", "hx-gpu019")]
    kinds = {(k, role) for k, _, role, _ in rows if k in ("nccl_watchdog_timeout", "xid_45_cleanup")}
    assert kinds == {("nccl_watchdog_timeout", "symptom"), ("xid_45_cleanup", "symptom")}
    assert sum(role == "symptom" for _, _, role, _ in rows) == len(doc["symptoms"]) > 0


def test_verdict_roles_migration_keeps_the_roles_both_ways(ruleset, store):
    """0019 moves the roles from job_events.role_in_job and verdict_symptoms onto the verdict; its downgrade puts
    them back with the same values, and upgrading again gives the arrays they came from."""
    ingest_bundle(ruleset, store, INCIDENTS / "01-xid79-fallen-off-bus")
    ctx = yaml.safe_load((INCIDENTS / "01-xid79-fallen-off-bus" / "context.yaml").read_text())
    key = {"c": ctx["cluster"], "j": str(ctx["job_id"])}
    arrays = ("SELECT v.root_event_id, v.cause_event_ids, v.symptom_event_ids, v.symptom_explained_by "
              "FROM attribution.verdicts v JOIN attribution.jobs j ON j.job_id = v.job_id "
              "AND j.current_verdict_id = v.id WHERE j.cluster = :c AND j.job_id = :j")
    with store.connect() as c:
        roles = {(k, n, i): r for k, n, r, i in c.execute(text(ROLES), key)}
        before = c.execute(text(arrays), key).one()
    migrate.downgrade(store, "0016")
    try:
        with store.connect() as c:
            old = {(k, n, i): r for k, n, r, i in c.execute(text(
                "SELECT e.kind, e.node, je.role_in_job, je.event_id FROM attribution.job_events je "
                "JOIN attribution.jobs j ON j.job_id = je.job_id AND j.id = je.job_ref "
                "JOIN attribution.events e ON e.id = je.event_id WHERE j.cluster = :c AND j.job_id = :j"), key)}
            symptoms = dict(c.execute(text(
                "SELECT s.event_id, s.explained_by FROM attribution.verdict_symptoms s JOIN attribution.jobs j "
                "ON j.job_id = s.job_id AND j.current_verdict_id = s.verdict_id "
                "WHERE j.cluster = :c AND j.job_id = :j"), key).all())
    finally:
        migrate.upgrade(store)
    assert old == roles
    assert symptoms == dict(zip(before.symptom_event_ids, before.symptom_explained_by))
    with store.connect() as c:
        after = c.execute(text(arrays), key).one()
    assert after.root_event_id == before.root_event_id
    assert set(after.cause_event_ids) == set(before.cause_event_ids)
    assert sorted(after.symptom_event_ids) == sorted(before.symptom_event_ids)
    assert dict(zip(after.symptom_event_ids, after.symptom_explained_by)) == symptoms
