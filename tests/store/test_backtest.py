"""`drain plan --as-of` and `drain backtest` on a generated history whose answers are computed by hand."""

from __future__ import annotations

import json
from datetime import timezone

import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.pipeline.ingest import ingest_bundle

from tests.conftest import ROOT
from tests.harness.demo_store import demo_store  # noqa: F401  (fixture)
from tests.harness.replay import drain_history


def _env(store):
    return {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}


def _ingest(ruleset, store, tmp_path):
    verdicts = {}
    for b in drain_history(tmp_path / "h"):
        _, v = ingest_bundle(ruleset, store, b)
        verdicts[b.name] = v.outcome
    return verdicts


def test_plan_as_of_names_the_node_once_its_evidence_is_stored_and_never_an_application_node(ruleset, store,
                                                                                             tmp_path):
    assert _ingest(ruleset, store, tmp_path) == {"201": "gpu_hardware", "202": "gpu_hardware", "211": "nvlink",
                                                 "212": "nvlink", "213": "nvlink", "221": "application",
                                                 "222": "application"}
    env = _env(store)

    def plan(at):
        r = CliRunner().invoke(main, ["drain", "plan", "--as-of", at, "--json"], env=env)
        assert r.exit_code == 0, r.output
        return [c["node"] for c in json.loads(r.output)]

    assert plan("2026-03-10T01:59:00Z") == []
    assert plan("2026-03-10T03:00:00Z") == ["g01"]  # an hour after the Xid 79; one NVLink job on g02 is not two
    assert plan("2026-03-10T10:00:00Z") == ["g01", "g02"]  # the second NVLink job on g02 (score 100 before 60)
    assert plan("2026-03-20T00:00:00Z") == ["g01"]  # 10 days on: inside gpu-lost's 14 days, past nvlink's 7
    assert plan("2026-03-30T00:00:00Z") == []  # 20 days on: every window past
    assert plan("2026-03-10T23:59:00Z") == ["g01", "g02"]  # g03's application failures never count

def test_backtest_gives_the_hand_computed_prevented_jobs_and_node_hours_for_two_policies(ruleset, store, tmp_path):
    _ingest(ruleset, store, tmp_path)
    shipped = yaml.safe_load((ROOT / "rules" / "drain-policy.yaml").read_text())
    strict = dict(shipped, conditions=[dict(c, min_count=2) if c["id"] == "gpu-lost" else c
                                       for c in shipped["conditions"]])
    (tmp_path / "strict.yaml").write_text(yaml.safe_dump(strict, sort_keys=False))
    r = CliRunner().invoke(main, ["drain", "backtest", "--policy", str(ROOT / "rules" / "drain-policy.yaml"),
                                  "--policy", str(tmp_path / "strict.yaml"), "--since", "2026-03-10T00:00:00Z",
                                  "--until", "2026-03-11T00:00:00Z", "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    shipped_r, strict_r = json.loads(r.output)["policies"]
    # shipped: g01 out at 02:00 (job 201's Xid 79) -> job 202 (05:00-07:00, 8 GPUs x 2 h) prevented, 22 node-hours;
    #          g02 out at 10:00 (second NVLink job, 212) -> job 213 (12:00-14:00) prevented, 14 node-hours
    assert [(n["node"], n["drained_at"], n["prevented_jobs"], n["prevented_gpu_hours"], n["node_hours"])
            for n in shipped_r["nodes"]] == [("g01", "2026-03-10T02:00:00Z", ["202"], 16.0, 22.0),
                                              ("g02", "2026-03-10T10:00:00Z", ["213"], 16.0, 14.0)]
    assert (shipped_r["nodes_drained"], shipped_r["prevented_failed_jobs"], shipped_r["prevented_gpu_hours"],
            shipped_r["node_hours_drained"]) == (2, 2, 32.0, 36.0)
    # strict (two Xid 79 needed): g01 out only at 07:00 (job 202's), nothing later to prevent, 17 node-hours
    assert [(n["node"], n["drained_at"], n["prevented_jobs"], n["prevented_gpu_hours"], n["node_hours"])
            for n in strict_r["nodes"]] == [("g01", "2026-03-10T07:00:00Z", [], 0.0, 17.0),
                                             ("g02", "2026-03-10T10:00:00Z", ["213"], 16.0, 14.0)]
    assert (strict_r["prevented_failed_jobs"], strict_r["node_hours_drained"]) == (1, 31.0)
    # the backtest leaves the policy in force alone
    with store.connect() as c:
        from sqlalchemy import text

        assert c.execute(text("SELECT count(*) FROM attribution.drain_policies")).scalar_one() == 0


def test_plan_as_of_an_hour_after_each_gpu_lost_incident_names_its_node_and_nothing_else(ruleset, store):
    """Done-when of issue 20 on the written incidents (and a real-world GPU-lost case): at each GPU-lost
    incident's end + 1 h the plan names its culprit; at every incident's end + 1 h it never names a node of an
    application, scheduler, unknown or symptom-only case unless that node has a GPU-lost event of its own."""
    from datetime import timedelta

    from attribution.scope.bundle import load_context

    from tests.conftest import INCIDENTS, bundles

    chosen = bundles(INCIDENTS) + [ROOT / "tests" / "realworld" / "09-socket-reset-by-peer-symptom-of-peer-xid79"]
    gpu_lost, innocent, times = [], set(), []
    for b in chosen:
        exp = yaml.safe_load((b / "expected.yaml").read_text())
        ctx = load_context(b / "context.yaml")
        ingest_bundle(ruleset, store, b)
        at = ctx.end + timedelta(hours=1)
        times.append(at)
        if (exp.get("root_cause") or {}).get("kind") in ("gpu_fallen_off_bus", "gpu_row_remap_failure"):
            gpu_lost.append((at, ctx.cluster, exp["culprits"]))
        if exp["outcome"] in ("application", "scheduler", "unknown") or not exp.get("culprits"):
            innocent |= {(ctx.cluster, n) for n in ctx.nodes}
    assert len(gpu_lost) == 2 and innocent
    env = _env(store)

    def plan(at):
        r = CliRunner().invoke(main, ["drain", "plan", "--as-of", at.isoformat(), "--json"], env=env)
        assert r.exit_code == 0, r.output
        return {(c["cluster"], c["node"]) for c in json.loads(r.output)}

    for at, cluster, culprits in gpu_lost:
        assert {(cluster, n) for n in culprits} <= plan(at)
    # one node of such cases is named, for a GPU-lost event of its own that the case's notes describe (a "trap"
    # for the verdict, not for the drain): sag-g3 (09, a timeout) logged an Xid 79 9 minutes after the job, and the
    # plan of that time drains it. jun-a03 (07, application) logged one in its previous boot, 25 h before the job,
    # and was power-cycled before it (the new boot is in the same journal): that reboot handled it (#31), so the
    # one-shot gpu-lost no longer counts it, and one fault is no recurrence
    named = set()
    for at in times:
        named |= plan(at) & innocent
    assert named == {("saguaro", "sag-g3")}


def test_backtest_of_the_demo_history_says_what_the_recurrence_conditions_save(demo_store):  # noqa: F811
    """#31 on the demo history (attribution demo): dgx017's Xid 74 comes back in five ISO weeks, each fault a week
    and some hours from the last, so no one-shot condition ever drains it; nvlink-weekly does at its third week's
    fault, which keeps it out of the two failed jobs that followed. The expected values come from the generator
    (fleetgen: the jobs, their nodes, GPUs and run times), not from the code under test."""
    from datetime import timedelta

    from attribution.fleetgen import NVLINK_NODE, history

    end = demo_store.end
    nvlink = [j for j in history(weeks=8, end=end) if j.story == "nvlink"]
    faults = [j.end - timedelta(minutes=11) for j in nvlink]
    assert all(b - a > timedelta(days=7) for a, b in zip(faults, faults[1:]))  # never two within nvlink-repeat's 7 d
    after = [j for j in nvlink if j.start >= faults[2]]
    gpu_hours = sum(8 * len(j.nodes) * (j.end - j.start).total_seconds() / 3600 for j in after)
    since = end.astimezone(timezone.utc).replace(microsecond=0) - timedelta(weeks=8)
    env = {"ATTRIBUTION_DATABASE_URL": demo_store.url}
    r = CliRunner().invoke(main, ["drain", "backtest", "--since", since.isoformat(), "--until",
                                  end.isoformat(), "--cluster", "demo", "--json"], env=env)
    assert r.exit_code == 0, r.output
    (shipped,) = json.loads(r.output)["policies"]
    drained = {n["node"]: n for n in shipped["nodes"]}
    assert drained[NVLINK_NODE]["drained_at"] == faults[2].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert drained[NVLINK_NODE]["conditions"] == ["nvlink-weekly"]
    assert drained[NVLINK_NODE]["prevented_jobs"] == [j.job_id for j in after] and len(after) == 2
    rec = shipped["recurrence"]
    assert rec["conditions"] == ["nvlink-weekly", "gpu-memory-weekly", "gpu-lost-again"]
    assert [n["node"] for n in rec["nodes"]] == [NVLINK_NODE] and rec["nodes"][0]["without"] is None
    assert rec["saved_failed_jobs"] == 2 and rec["saved_gpu_hours"] == round(gpu_hours, 3) == 288.0
    assert rec["without"]["nodes_drained"] == shipped["nodes_drained"] - 1
    text_out = CliRunner().invoke(main, ["drain", "backtest", "--since", since.isoformat(), "--until",
                                         end.isoformat(), "--cluster", "demo"], env=env).output
    assert "recurrence conditions (nvlink-weekly, gpu-memory-weekly, gpu-lost-again) save 288.0 GPU-hours" in text_out
    assert f"demo/{NVLINK_NODE}" in text_out and "(never without them)" in text_out
