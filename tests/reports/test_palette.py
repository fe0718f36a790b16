"""attribution.reports.palette: one colour per outcome and per event kind, the same in every chart and page (the
fleet report's three charts, the timeline, the dashboard's badges), whatever else the chart draws."""

from __future__ import annotations

from datetime import date, datetime, timezone

from attribution.reports.fleet_charts import failed_jobs_chart, fault_events_chart, gpu_hours_chart
from attribution.reports.palette import OUTCOME_COLORS, Palette, outcome_css
from attribution.reports.timeline_chart import timeline_spec
from attribution.reports.timeline_data import build_timeline
from attribution.store.reports import FleetData

UTC = timezone.utc
WEEKS = (date(2026, 11, 16), date(2026, 11, 23))


def _scales(spec, field: str) -> dict[str, str]:
    """kind (or outcome) -> colour, from every colour scale on `field` in a Vega-Lite specification."""
    found: dict[str, str] = {}

    def walk(node):
        if isinstance(node, dict):
            color = (node.get("encoding") or {}).get("color") or {}
            scale = color.get("scale") or {}
            if color.get("field") == field and "domain" in scale:
                for k, c in zip(scale["domain"], scale["range"]):
                    assert found.setdefault(k, c) == c, k
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    return found


def _fleet(fault_kinds: list[str], causes: list[tuple[str, str]]) -> FleetData:
    return FleetData(
        since=datetime(2026, 11, 16, tzinfo=UTC), until=datetime(2026, 11, 30, tzinfo=UTC), weeks=WEEKS,
        totals={"jobs": 9, "failed": 3, "failed_gpu_hours": 10.0},
        failed_jobs_weekly=[{"week": WEEKS[0], "outcome": o, "jobs": 1} for o, _ in causes],
        fault_events_weekly=[{"week": WEEKS[1], "kind": k, "events": 2} for k in fault_kinds],
        failed_gpu_hours=[{"outcome": o, "cause": k, "jobs": 1, "gpu_hours": 3.0, "jobs_without_size": 0,
                           "lost_gpu_hours": 0.0} for o, k in causes])


def test_every_kind_of_the_catalog_has_its_own_colour(ruleset):
    palette = Palette.of(ruleset.kinds)
    assert palette == Palette.shipped()  # the service's pages and the static ones colour alike
    for role in ("cause", "symptom"):
        kinds = [k for k, spec in ruleset.kinds.items() if spec.role == role]
        assert len({palette.kind(k) for k in kinds}) == len(kinds), role
    assert palette.kind("kind_of_an_older_rule_pack") == palette.kind("kind_of_an_older_rule_pack")


def test_a_kind_has_one_colour_in_all_three_fleet_charts_and_an_outcome_the_colour_of_its_badge(ruleset):
    palette = Palette.of(ruleset.kinds)
    # the same kinds with other neighbours in each chart: a scheme assigned by position would colour them apart
    data = _fleet(["nvlink_error", "gpu_ecc_dbe", "ib_link_down"],
                  [("gpu_hardware", "gpu_fallen_off_bus"), ("nvlink", "nvlink_error"), ("application", "python_exception"),
                   ("gpu_hardware", "gpu_ecc_dbe")])
    faults = _scales(fault_events_chart(data, palette), "kind")
    hours = _scales(gpu_hours_chart(data, palette), "cause")
    assert set(faults) == {"nvlink_error", "gpu_ecc_dbe", "ib_link_down"}
    for kind in set(faults) & set(hours):
        assert faults[kind] == hours[kind] == palette.kind(kind)
    outcomes = _scales(failed_jobs_chart(data), "outcome")
    css = outcome_css()
    for outcome, color in outcomes.items():
        assert color == OUTCOME_COLORS[outcome]
        assert f".o-{outcome} {{ background: {color};" in css  # the dashboard's badge of that outcome


def _doc(counts: dict[str, int]) -> dict:
    root = {"kind": "gpu_fallen_off_bus", "code": 79, "node": "n1", "gpu": None, "rank": None,
            "time": "2026-01-01T00:10:00Z", "source": "kernel", "rule": "kernel.xid", "location": "k.log:1",
            "line": "Xid 79", "role": "cause", "outcome": "gpu_hardware", "action": "drain_node"}
    symptoms = [dict(root, kind=kind, location=f"job.out:{i}", rule="job.x", node="n2", time="2026-01-01T00:10:05Z",
                     explained_by="root_cause", line=f"{kind} {i}")
                for kind, n in counts.items() for i in range(n)]
    return {"job": {"cluster": "c1", "job_id": "7", "state": "FAILED", "nodes": ["n1", "n2"],
                    "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:20:00Z"},
            "outcome": "gpu_hardware", "confidence": "high", "action": "drain_node", "root_cause": root,
            "culprits": [{"node": "n1", "gpu": None}], "symptoms": symptoms, "other_causes": [],
            "explanation": "", "coverage": [], "rules_version": "x"}


def test_a_symptom_kind_has_its_colour_in_every_timeline_however_frequent(ruleset):
    palette = Palette.of(ruleset.kinds)
    often = _scales(timeline_spec(build_timeline(_doc({"nccl_error": 9, "nccl_watchdog_timeout": 1})), palette), "k")
    rarely = _scales(timeline_spec(build_timeline(_doc({"nccl_error": 1, "nccl_watchdog_timeout": 9})), palette), "k")
    assert often == rarely == {k: palette.kind(k) for k in ("nccl_error", "nccl_watchdog_timeout")}
