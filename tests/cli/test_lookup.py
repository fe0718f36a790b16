"""attribution/cli/lookup.py: `attribution node NAME` says why a node is or is not a drain candidate (#31), on the
demo history (`attribution demo`)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from attribution.cli import main
from attribution.fleetgen import NVLINK_NODE

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
