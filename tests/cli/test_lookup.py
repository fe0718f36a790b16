"""attribution/cli/lookup.py: `attribution node NAME` says why a node is or is not a drain candidate (#31), on the
demo history (`attribution demo`); `attribution jobs`: its columns and its times."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from click.testing import CliRunner

from attribution.cli import main
from attribution.fleetgen import NVLINK_NODE
from attribution.scope.bundle import load_context

from tests.conftest import INCIDENTS
from tests.harness.demo_store import demo_store  # noqa: F401  (fixture)


def test_the_mission_case_is_a_drain_candidate_with_its_recurrence_reason(demo_store):  # noqa: F811
    """dgx017: Xid 74 on one GPU in five different weeks, culprit of five failed jobs (fleetgen NVLINK_WEEKS)."""
    env = {"ATTRIBUTION_DATABASE_URL": demo_store.url}
    r = CliRunner().invoke(main, ["node", NVLINK_NODE], env=env)
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith(f"demo/{NVLINK_NODE} since ")
    assert "drain candidate (score 60.0): attribution: nvlink74 weeks " in first
    conditions = r.output.split("== drain conditions (nearest first)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert conditions[0] == "  nvlink-weekly: 5 weeks of 3 needed: candidate  [recurrence]"
    # its last fault is two weeks old (fleetgen's week 6 of 8): past nvlink-repeat's week
    assert "  nvlink-repeat: nothing within 7 days" in conditions
    doc = json.loads(CliRunner().invoke(main, ["node", NVLINK_NODE, "--json"], env=env).output)
    weekly = doc["drain_conditions"][0]
    assert (weekly["condition"], weekly["met"], weekly["counted"], weekly["needed"], len(weekly["weeks"])) == \
        ("nvlink-weekly", True, 5, 3, 5)
    assert doc["drain_summary"] == "nvlink-weekly: 5 weeks of 3 needed: candidate"


def _ingested(store, *names):
    env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}
    r = CliRunner().invoke(main, ["ingest", *(str(INCIDENTS / n) for n in names)], env=env)
    assert r.exit_code == 0, r.output
    return env


def test_the_job_list_keeps_the_root_cause_out_of_the_culprits_column(store):
    """#32: a root cause longer than its column ran into the culprits (`gpu_fallen_off_bus 79 @hx-gpu019`)."""
    env = _ingested(store, "01-xid79-fallen-off-bus", "05-nvswitch-fatal-sxid", "07-app-python-keyerror")
    r = CliRunner().invoke(main, ["jobs", "--outcome", "failed"], env=env)
    assert r.exit_code == 0, r.output
    header, *lines = r.output.splitlines()
    at = header.index("culprits")
    assert len(lines) == 3
    for line in lines:
        assert line[at - 2:at] == "  " and " " not in line[at:], line
    bus = next(line for line in lines if "gpu_fallen_off_bus" in line)
    assert "gpu_fallen_off_bus 79 @hx-gpu019" in bus and bus[at:] == "hx-gpu019"


def test_jobs_since_an_age_is_since_that_long_ago(store):
    """#32: `--since 7d` was refused while `db prune --older-than 180d` took it."""
    env = _ingested(store, "06-ib-link-down")
    end = load_context(INCIDENTS / "06-ib-link-down" / "context.yaml").end
    days = (datetime.now(timezone.utc) - end).days
    assert days >= 2

    def listed(since):
        r = CliRunner().invoke(main, ["jobs", "--since", since, "--json"], env=env)
        assert r.exit_code == 0, r.output
        return len(json.loads(r.output)["jobs"])

    assert [listed(s) for s in (f"{days + 1}d", f"now-{days + 1}d", f"{days + 1} days ago")] == [1, 1, 1]
    assert [listed(s) for s in (f"{days - 1}d", f"now-{days - 1}d", "yesterday")] == [0, 0, 0]
    bad = CliRunner().invoke(main, ["jobs", "--since", "7 fortnights"], env=env)
    assert bad.exit_code == 2 and bad.output.startswith("attribution: --since: not a time: '7 fortnights'")
