"""The rules Citus needs, checked on plain PostgreSQL so that they cannot regress (docs/store.md, "Past one server").

The catalog: every table is in models.DISTRIBUTION; every primary key, unique constraint and unique index of a
distributed table includes its distribution column; a foreign key between distributed tables stays inside one
co-location group and includes the distribution column on both sides; nothing references a distributed table
from a reference table. The SQL: no volatile or stable function in an upsert's DO UPDATE (Citus refuses it);
every statement of one job's ingest and verdict that reads or changes a per-job table names the job's `job_id`,
and one that changes a per-node table names the node; a join of two tables of one co-location group joins on
their distribution columns (else Citus needs a repartition join, which it refuses); no view, example query,
Grafana panel or dashboard query has a correlated subquery (a SubPlan in its plan) that reads a distributed table.
The statements are the ones the product really runs: they are recorded from a real ingest, attribution, drain,
report, dashboard and alerts run.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from sqlalchemy import event, text

from attribution.fleetgen import history, write_bundle
from attribution.pipeline.ingest import ingest_bundle
from attribution.store import alerts as store_alerts
from attribution.store import browse, reads, reports
from attribution.store import drain as store_drain
from attribution.store.distribute import plan
from attribution.store.models import DISTRIBUTION

from tests.conftest import INCIDENTS, ROOT, bundles

S = "attribution"
PER_JOB = {t for t, d in DISTRIBUTION.items() if d is not None and d[0] == "job_id"}
PER_NODE = {t for t, d in DISTRIBUTION.items() if d is not None and d[0] != "job_id"}
DISTRIBUTED = PER_JOB | PER_NODE


def _group(table: str) -> str:
    d = DISTRIBUTION[table]
    return d[1] or table


def _tables(conn) -> set[str]:
    return set(conn.execute(text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = :s AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
        "AND c.relname <> 'alembic_version'"), {"s": S}).scalars())


def test_every_table_has_a_place_in_the_design(store):
    with store.connect() as c:
        assert _tables(c) == set(DISTRIBUTION)
    # the Citus calls cover every table once, anchors before their members
    order = [t for t, *_ in plan()]
    assert sorted(order) == sorted(DISTRIBUTION)
    for t, kind, col, colocate in plan():
        if colocate:
            assert order.index(colocate) < order.index(t)


def test_unique_keys_include_the_distribution_column(store):
    with store.connect() as c:
        rows = c.execute(text(
            "SELECT t.relname, i.relname, ARRAY(SELECT a.attname FROM unnest(x.indkey) k "
            "  JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k) "
            "FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = :s AND x.indisunique AND NOT t.relispartition"), {"s": S}).all()
        nulls = c.execute(text(
            "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND NOT a.attnotnull "
            "AND a.attnum > 0"), {"s": S}).all()
    checked = set()
    for table, index, columns in rows:
        if table not in DISTRIBUTED:
            continue
        column = DISTRIBUTION[table][0]
        assert column in columns, f"{table}: unique index {index} {columns} lacks the distribution column {column}"
        checked.add(table)
    assert checked == DISTRIBUTED, "every distributed table has a primary key"
    nullable = {(t, a) for t, a in nulls}
    for table in DISTRIBUTED:
        assert (table, DISTRIBUTION[table][0]) not in nullable, f"{table}: the distribution column may be NULL"


def test_foreign_keys_stay_inside_a_colocation_group(store):
    with store.connect() as c:
        rows = c.execute(text(
            "SELECT f.conname, s.relname, d.relname, "
            "  ARRAY(SELECT a.attname FROM unnest(f.conkey) WITH ORDINALITY k(n, i) JOIN pg_attribute a "
            "        ON a.attrelid = f.conrelid AND a.attnum = k.n ORDER BY k.i), "
            "  ARRAY(SELECT a.attname FROM unnest(f.confkey) WITH ORDINALITY k(n, i) JOIN pg_attribute a "
            "        ON a.attrelid = f.confrelid AND a.attnum = k.n ORDER BY k.i) "
            "FROM pg_constraint f JOIN pg_class s ON s.oid = f.conrelid JOIN pg_class d ON d.oid = f.confrelid "
            "JOIN pg_namespace n ON n.oid = s.relnamespace "
            "WHERE n.nspname = :s AND f.contype = 'f' AND NOT s.relispartition"), {"s": S}).all()
    assert rows, "the schema has foreign keys to check"
    for name, src, dst, cols, ref_cols in rows:
        if src not in DISTRIBUTED:
            assert dst not in DISTRIBUTED, f"{name}: reference table {src} references distributed {dst}"
            continue
        if dst not in DISTRIBUTED:
            continue  # a distributed table may reference a reference table
        assert _group(src) == _group(dst), f"{name}: {src} and {dst} are in different co-location groups"
        col, ref_col = DISTRIBUTION[src][0], DISTRIBUTION[dst][0]
        assert col in cols and ref_col in ref_cols and cols.index(col) == ref_cols.index(ref_col), \
            f"{name}: {cols} -> {dst} {ref_cols} does not match the distribution columns"


# -- the SQL the product runs --------------------------------------------------------------------------------


class Recorder:
    def __init__(self, engine) -> None:
        self.phase = "setup"
        self.statements: list[tuple[str, str]] = []
        event.listen(engine, "before_cursor_execute", self._on)

    def _on(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.statements.append((self.phase, " ".join(statement.split())))


@pytest.fixture(scope="module")
def recorded(pg_server, pg_template, ruleset, tmp_path_factory):
    """The statements of a real run: ingest and attribution (phase "job"), then drain and reads ("fleet")."""
    import uuid

    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.drain.policy import load_policy
    from attribution.store.db import Target, make_engine

    pg_server.ensure_up()
    name = f"test_dist_{uuid.uuid4().hex[:10]}"
    url = pg_server.create_database(name, template=pg_template)
    engine = make_engine(Target(make_url(url), embedded=False), Settings(), pool_size=2)
    rec = Recorder(engine)
    tmp = tmp_path_factory.mktemp("dist")
    try:
        rec.phase = "job"
        for b in bundles(INCIDENTS)[:6]:
            ingest_bundle(ruleset, engine, b)
        for j in history(weeks=3, end=datetime.now(timezone.utc))[:40]:
            ingest_bundle(ruleset, engine, write_bundle(j, tmp))
        with engine.connect() as c:
            cluster, job_id = c.execute(text(
                "SELECT cluster, job_id FROM attribution.job_verdicts WHERE verdict_id IS NOT NULL "
                "ORDER BY cluster, job_id LIMIT 1")).one()
        reports.stored_job(engine, cluster, job_id)
        with engine.connect() as c:
            reads.current_verdict(c, cluster, job_id)
            reads.current_verdict(c, cluster, job_id, datetime.now(timezone.utc))
        rec.phase = "fleet"
        store_drain.load_policy(engine, load_policy(ruleset))
        for cand in store_drain.candidates(engine):
            store_drain.record_resume(engine, cand.cluster, cand.node, "test", "resumed by the test")
        reports.fleet_data(engine)
        now = datetime.now(timezone.utc)
        with engine.connect() as c:
            reads.node_events(c, "demo", "dgx017", datetime(2020, 1, 1, tzinfo=timezone.utc), None, 10)
            # the dashboard's and the service's reads, and the alerts' streams
            rows, _ = browse.list_jobs(c, browse.JobFilter(), limit=5)
            browse.list_jobs(c, browse.JobFilter(cluster="demo", outcome=browse.FAILED, node=rows[0]["culprit_nodes"]
                                                 [0] if rows and rows[0]["culprit_nodes"] else "dgx017"), limit=5)
            browse.node_history(c, "demo", "dgx017", now)
            browse.node_telemetry(c, "demo", "dgx017", datetime(2020, 1, 1, tzinfo=timezone.utc))
            browse.clusters(c)
            browse.node_clusters(c, "dgx017")
            store_alerts.new_verdicts(c, 0, 10)
            store_alerts.new_drain_actions(c, 0, 10)
            c.execute(text("SELECT * FROM attribution.gpu_counters_latest")).all()
        yield engine, rec.statements
    finally:
        engine.dispose()
        pg_server.drop_database(name)


TABLE_REF = re.compile(r"\battribution\.(\w+)")


def test_upserts_update_with_immutable_functions_only(recorded):
    engine, statements = recorded
    upserts = {s for _, s in statements if "DO UPDATE" in s.upper()}
    assert len(upserts) >= 4, "the run exercised the upserts (rollups, coverage, failed roots, drain policy)"
    with engine.connect() as c:
        for s in upserts:
            update = re.split(r"DO UPDATE SET", s, flags=re.I)[1]
            update = re.split(r"\bRETURNING\b|\)\s*,\s*\w+ AS \(|\)\s*SELECT\b", update, flags=re.I)[0]
            for fn in set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", update, flags=re.I)):
                vol = c.execute(text("SELECT DISTINCT provolatile FROM pg_proc WHERE proname = lower(:f)"),
                                {"f": fn}).scalars().all()
                assert vol in ([], ["i"]), f"DO UPDATE calls {fn}() ({vol}), which Citus refuses: {s[:200]}"
            assert not re.search(r"\b(current_timestamp|current_date|localtimestamp)\b", update, re.I), s[:200]


def test_every_per_job_statement_names_the_job(recorded):
    _, statements = recorded
    job = [s for phase, s in statements if phase == "job"]
    touching = [s for s in job if PER_JOB & set(TABLE_REF.findall(s))]
    assert len(touching) > 50
    for s in touching:
        assert re.search(r"\bjob_id\b", s), f"a per-job statement without the job's job_id: {s[:200]}"
        for m in re.finditer(r"\b(UPDATE|DELETE FROM)\s+attribution\.(\w+)", s, re.I):
            if m.group(2) in PER_JOB:
                assert re.search(r"WHERE .*\bjob_id = ", s[m.end():], re.I), f"not routed by job_id: {s[:200]}"


def test_every_per_node_change_names_the_node(recorded):
    _, statements = recorded
    changes = [(m.group(2), s) for _, s in statements
               for m in re.finditer(r"\b(UPDATE|DELETE FROM)\s+attribution\.(\w+)", s, re.I)]
    node_changes = [(t, s) for t, s in changes if t in PER_NODE]
    assert node_changes, "the run resumed a node (an UPDATE of its events)"
    for table, s in node_changes:
        col = DISTRIBUTION[table][0]
        assert re.search(rf"WHERE .*\b{col} = ", s, re.I), f"{table}: not routed by {col}: {s[:200]}"


def _subplans_reading(plan: dict, tables: set[str], inside: bool = False) -> list[str]:
    found = []
    inside = inside or plan.get("Parent Relationship") == "SubPlan"
    rel = plan.get("Relation Name")
    if inside and rel:
        base = re.sub(r"_p\d{6}$", "", rel)
        if base in tables:
            found.append(base)
    for child in plan.get("Plans", []):
        found += _subplans_reading(child, tables, inside)
    return found


def _views(conn) -> list[str]:
    return sorted(conn.execute(text("SELECT viewname FROM pg_views WHERE schemaname = :s"), {"s": S}).scalars())


#: The dashboard's and the alerts' queries, with made-up values for their parameters.
DASHBOARD = {
    "browse job list": (browse.JOB_COLUMNS + " WHERE j.cluster = :cluster ORDER BY 1 LIMIT :lim",
                        {"cluster": "demo", "lim": 10}),
    "browse node faults weekly": (browse.NODE_FAULTS_WEEKLY, {"cluster": "demo", "node": "dgx017",
                                                              "since": datetime(2020, 1, 1, tzinfo=timezone.utc)}),
    "browse node recurring": (browse.NODE_RECURRING, {"cluster": "demo", "node": "dgx017"}),
    "browse node failed jobs": (browse.NODE_FAILED_JOBS, {"cluster": "demo", "node": "dgx017", "lim": 10,
                                                          "since": datetime(2020, 1, 1, tzinfo=timezone.utc)}),
    "browse node drains": (browse.NODE_DRAINS, {"cluster": "demo", "node": "dgx017", "lim": 10}),
    "browse node candidate": (browse.NODE_CANDIDATE, {"cluster": "demo", "node": "dgx017"}),
    "browse node gpu counters": (browse.NODE_GPU_COUNTERS, {"cluster": "demo", "node": "dgx017", "lim": 10}),
    "browse node port counters": (browse.NODE_PORT_COUNTERS, {"cluster": "demo", "node": "dgx017", "lim": 10}),
    "browse node counter events": (browse.NODE_COUNTER_EVENTS, {"cluster": "demo", "node": "dgx017", "lim": 10,
                                                                "source": "telemetry",
                                                                "since": datetime(2020, 1, 1, tzinfo=timezone.utc)}),
    "alerts verdicts": (store_alerts.VERDICTS, {"after": 0, "lim": 10}),
    "alerts drains": (store_alerts.DRAINS, {"after": 0, "lim": 10}),
}


def _functions(conn) -> dict[str, str]:
    """The query of every function of the schema that reads a table (drain_candidates_at: the drain plan, which
    the drain_candidates view calls), its arguments made values: a time is now(), anything else NULL. A SQL
    function's body; a PL/pgSQL one's `RETURN QUERY EXECUTE format($q$...$q$, args)` (Citus plans no query with
    parameters in a function, so the values go in as literals)."""
    out = {}
    for name, lang, src, args, types in conn.execute(text(
            "SELECT p.proname, l.lanname, p.prosrc, p.proargnames, "
            "  ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t) "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang "
            "WHERE n.nspname = :s AND l.lanname IN ('sql', 'plpgsql')"), {"s": S}):
        if not TABLE_REF.search(src):
            continue
        values = {a: "now()" if t.startswith("timestamp") else f"CAST(NULL AS {t})" for a, t in zip(args or (), types)}
        if lang == "plpgsql":
            # its local variables too (drain_candidates_at's earliest time): a time is now(), anything else NULL
            declared = re.search(r"^\s*DECLARE(.*?)^\s*BEGIN", src, re.S | re.M)
            for var, t in re.findall(r"(\w+)\s+([\w ]+?)\s*(?::=[^;]*)?;", declared.group(1) if declared else ""):
                values[var] = "now()" if t.startswith("timestamp") else f"CAST(NULL AS {t})"
            m = re.search(r"RETURN QUERY EXECUTE format\(\$q\$(.*?)\$q\$,([^)]*)\)", src, re.S)
            if m is None:
                continue  # DDL and maintenance (ensure_event_partitions): no query a view or a plan reads
            src = m.group(1)
            for i, arg in enumerate(a.strip() for a in m.group(2).split(",")):
                src = src.replace(f"%{i + 1}$L", values[arg])
        else:
            for arg, value in values.items():
                src = re.sub(rf"(?<![.\w]){arg}\b", value, src)
        out[name] = src.strip().rstrip(";")
    return out


def _queries(conn) -> dict[str, tuple[str, dict]]:
    out = {f"view {v}": (f"SELECT * FROM attribution.{v}", {}) for v in _views(conn)}
    out.update({f"function {f}": (sql, {}) for f, sql in _functions(conn).items()})
    for q in sorted((ROOT / "sql" / "queries").glob("*.sql")):
        out[f"query {q.stem}"] = (q.read_text(), {})
    dash = json.loads((ROOT / "sql" / "grafana" / "attribution-fleet.json").read_text())
    for p in dash["panels"]:
        for t in p.get("targets", []):
            if t.get("rawSql"):
                sql = re.sub(r"\$__timeFilter\(([^)]+)\)", r"\1 >= now() - interval '90 days'", t["rawSql"])
                out[f"grafana {p['title']}"] = (sql.replace("$cluster", "'demo'"), {})
    out.update(DASHBOARD)
    return out


def test_no_correlated_subquery_reads_a_distributed_table(recorded):
    engine, _ = recorded
    with engine.connect() as c:
        queries = _queries(c)
        assert {"view gpu_counters_latest", "view drain_candidates", "function drain_candidates_at",
                "view lost_gpu_hours", "view failure_recurrence", "browse node failed jobs"} <= set(queries)
        for name, (sql, params) in queries.items():
            plan_json = c.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params).scalar()
            doc = plan_json if isinstance(plan_json, list) else json.loads(plan_json)
            bad = _subplans_reading(doc[0]["Plan"], DISTRIBUTED)
            assert not bad, f"{name}: a correlated subquery reads {bad} (Citus cannot push it down)"


def test_the_check_sees_a_correlated_subquery(recorded):
    """The plan walk finds the pattern Citus refuses (the old fault_events view's job count)."""
    engine, _ = recorded
    with engine.connect() as c:
        doc = c.execute(text(
            "EXPLAIN (FORMAT JSON) SELECT e.id, (SELECT count(*) FROM attribution.job_events je "
            "WHERE je.event_id = e.id) FROM attribution.events e")).scalar()
    assert _subplans_reading(doc[0]["Plan"], DISTRIBUTED) == ["job_events"]


#: `attribution.<table> <alias>` after FROM or JOIN (an alias that is a keyword is none).
ALIASED = re.compile(r"\b(?:FROM|JOIN)\s+attribution\.(\w+)(?:\s+(?:AS\s+)?(\w+))?", re.I)
#: `JOIN attribution.<table> <alias> ON <condition>`, the condition up to the next clause.
JOIN_ON = re.compile(r"\bJOIN\s+attribution\.(\w+)\s+(?:AS\s+)?(\w+)\s+ON\s+(.*?)"
                     r"(?=\b(?:LEFT|RIGHT|INNER|FULL|CROSS|JOIN|WHERE|GROUP|ORDER|LIMIT|UNION|RETURNING|WINDOW)\b"
                     r"|\)|$)", re.I | re.S)
KEYWORDS = {"on", "where", "group", "order", "limit", "join", "left", "right", "inner", "full", "cross", "using",
            "union", "returning", "set", "select", "with", "window", "as"}


def unrouted_joins(sql: str) -> list[str]:
    """The joins of two tables of one co-location group whose condition does not equate their distribution
    columns (`a.job_id = b.job_id`, `e.node_key = f.node`...)."""
    sql = re.sub(r"--[^\n]*", " ", sql)
    aliases = {}
    for table, alias in ALIASED.findall(sql):
        if alias and alias.lower() not in KEYWORDS:
            aliases[alias] = table
        aliases.setdefault(table, table)
    bad = []
    for table, alias, cond in JOIN_ON.findall(sql):
        if table not in DISTRIBUTED:
            continue
        for other in set(re.findall(r"\b(\w+)\.\w+", cond)) - {alias}:
            peer = aliases.get(other)
            if peer not in DISTRIBUTED or _group(peer) != _group(table):
                continue
            mine, theirs = DISTRIBUTION[table][0], DISTRIBUTION[peer][0]
            pair = (rf"\b{alias}\.{mine}\s*=\s*{other}\.{theirs}\b", rf"\b{other}\.{theirs}\s*=\s*{alias}\.{mine}\b")
            if not any(re.search(p, cond) for p in pair):
                bad.append(f"{peer} {other} JOIN {table} {alias} ON {' '.join(cond.split())[:120]}")
    return bad


def test_joins_inside_a_group_are_on_the_distribution_columns(recorded):
    engine, statements = recorded
    with engine.connect() as c:
        texts = {name: sql for name, (sql, _) in _queries(c).items()}
        for v in _views(c):
            texts[f"view {v}"] = c.execute(text("SELECT pg_get_viewdef(CAST(:v AS regclass), true)"),
                                           {"v": f"{S}.{v}"}).scalar()
    texts.update({f"statement {i}": s for i, (_, s) in enumerate(statements)})
    joined = [n for n, sql in texts.items() if JOIN_ON.search(sql)]
    assert len(joined) > 20, "the run and the queries have joins to check"
    for name, sql in texts.items():
        assert not unrouted_joins(sql), f"{name}: {unrouted_joins(sql)}"


def test_the_join_check_sees_a_join_off_the_distribution_column():
    """What 0008's gpu_counters_latest did (device_counters joined to jobs by id alone), and the fixed join."""
    assert unrouted_joins("SELECT j.job_id FROM attribution.device_counters d "
                          "JOIN attribution.jobs j ON j.id = d.job_ref WHERE d.phase = 'epilog'")
    assert unrouted_joins("SELECT 1 FROM attribution.jobs j LEFT JOIN attribution.verdicts v "
                          "ON v.id = j.current_verdict_id") == ["jobs j JOIN verdicts v ON v.id = j.current_verdict_id"]
    assert not unrouted_joins("SELECT 1 FROM attribution.jobs j JOIN attribution.verdicts v "
                              "ON v.job_id = j.job_id AND v.id = j.current_verdict_id")
    assert not unrouted_joins("SELECT 1 FROM attribution.events e JOIN attribution.event_jobs l "
                              "ON l.node_key = e.node_key AND l.event_id = e.id")
