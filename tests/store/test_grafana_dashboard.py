"""sql/grafana: the dashboard reads only the public views, and every query it holds runs on a real database
filled like `attribution demo` and returns rows (Grafana's macros and variables replaced as Grafana would)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
import yaml
from sqlalchemy import text

from tests.conftest import ROOT
from tests.harness.demo_store import demo_store  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow  # a generated fleet history behind every dashboard query

GRAFANA = ROOT / "sql" / "grafana"
DASHBOARD = GRAFANA / "attribution-fleet.json"
VIEWS = {"job_verdicts", "fault_events", "node_faults_weekly", "recurring_faults", "drain_candidates"}


def _queries() -> list[tuple[str, str]]:
    """(name, SQL) of every panel target and every query variable of the dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            out.append((f"{panel['title']} [{t['refId']}]", t["rawSql"]))
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            out.append((f"variable ${var['name']}", var["query"]))
    return out


def _range(expr: str, now: datetime) -> datetime:
    """Grafana's relative times as the dashboard uses them: now, now-Nd, now-Nw, now-Nh."""
    if expr == "now":
        return now
    m = re.fullmatch(r"now-(\d+)([hdw])", expr)
    assert m, f"unsupported time expression {expr!r}"
    return now - timedelta(**{{"h": "hours", "d": "days", "w": "weeks"}[m.group(2)]: int(m.group(1))})


def interpolate(sql: str, start: datetime, end: datetime, variables: dict[str, list[str]]) -> str:
    """What Grafana sends to PostgreSQL: time macros as literals, multi-value variables as quoted lists."""
    lit = {"from": f"'{start.isoformat()}'", "to": f"'{end.isoformat()}'"}
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)", lambda m: f"{m.group(1)} BETWEEN {lit['from']} AND {lit['to']}", sql)
    sql = sql.replace("$__timeFrom()", lit["from"]).replace("$__timeTo()", lit["to"])
    for name, values in variables.items():
        quoted = ",".join("'" + v.replace("'", "''") + "'" for v in values)
        sql = sql.replace("${" + name + "}", quoted).replace("$" + name, quoted)
    assert "$" not in sql, f"a macro or variable left unreplaced: {sql}"
    return sql


def test_dashboard_reads_only_the_public_views():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["panels"]
    titles = {p["title"] for p in dash["panels"]}
    assert {"Failed jobs per week, by outcome", "Fault events per week, by kind", "Top recurring nodes",
            "Top recurring GPUs", "Drain candidates", "Failed GPU-hours, by cause"} <= titles
    for name, sql in _queries():
        read = set(re.findall(r"attribution\.(\w+)", sql))
        assert read and read <= VIEWS, f"{name} reads {read - VIEWS or 'nothing'}"
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "attribution-pg"
        assert all(t["datasource"]["uid"] == "attribution-pg" for t in p["targets"])


def test_provisioning_example_matches_the_dashboard():
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "attribution.yaml").read_text())
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "attribution.yaml").read_text())
    source = ds["datasources"][0]
    assert source["uid"] == "attribution-pg" and source["type"] == "grafana-postgresql-datasource"
    assert source["jsonData"]["database"] and "password" in source["secureJsonData"]
    assert prov["providers"][0]["type"] == "file" and prov["providers"][0]["options"]["path"]


@pytest.mark.parametrize("name,sql", _queries(), ids=[n for n, _ in _queries()])
def test_every_dashboard_query_returns_rows(demo_store, name, sql):  # noqa: F811
    dash = json.loads(DASHBOARD.read_text())
    start = _range(dash["time"]["from"], demo_store.end)
    end = _range(dash["time"]["to"], demo_store.end)
    with demo_store.engine.connect() as c:
        clusters = [r[0] for r in c.execute(text("SELECT DISTINCT cluster FROM attribution.job_verdicts"))]
        rows = c.execute(text(interpolate(sql, start, end, {"cluster": clusters}))).all()
    assert rows, f"{name} returned no rows on the demo data"
