"""attribution/cli/drain.py: `drain log` (an empty audit says so; --json) and `drain backtest` with the documented
relative form of --since (#32: `--since now-60d` died with AttributeError: 'Backtest' object has no attribute
'version')."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from click.testing import CliRunner

from attribution.cli import main
from attribution.store.drain import record_resume

UTC = timezone.utc


def _env(store):
    return {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False)}


def test_an_empty_drain_log_says_so_and_its_json_is_an_empty_list(store):
    r = CliRunner().invoke(main, ["drain", "log"], env=_env(store))
    assert r.exit_code == 0 and r.output == "no drain decision recorded\n"
    r = CliRunner().invoke(main, ["drain", "log", "--cluster", "kestrel"], env=_env(store))
    assert r.output == "no drain decision recorded for cluster kestrel\n"
    r = CliRunner().invoke(main, ["drain", "log", "--json"], env=_env(store))
    assert r.exit_code == 0 and json.loads(r.output) == []


def test_drain_log_json_lists_the_decisions_newest_first(store):
    record_resume(store, "kestrel", "kes-n203", "alice", "fixed the NVLink bridge")
    record_resume(store, "kestrel", "kes-n204", "bob", "reseated")
    r = CliRunner().invoke(main, ["drain", "log", "--json"], env=_env(store))
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(a["node"], a["decision"], a["detail"], a["reason"]) for a in rows] == [
        ("kes-n204", "resumed", "reseated", None), ("kes-n203", "resumed", "fixed the NVLink bridge", None)]
    at = datetime.fromisoformat(rows[0]["at"].replace("Z", "+00:00"))
    assert abs(datetime.now(UTC) - at) < timedelta(minutes=10) and rows[0]["at"].endswith("Z")
    text = CliRunner().invoke(main, ["drain", "log"], env=_env(store)).output.splitlines()
    assert len(text) == 2 and "resumed  kestrel/kes-n204" in text[0] and text[0].endswith("reseated")


def test_backtest_takes_the_relative_since_of_its_help_in_text_and_json(store):
    for extra in ([], ["--json"]):
        r = CliRunner().invoke(main, ["drain", "backtest", "--since", "now-60d", *extra], env=_env(store))
        assert r.exit_code == 0, r.output
    assert r.output.startswith("{") and json.loads(r.output)["policies"][0]["nodes_drained"] == 0
    text = CliRunner().invoke(main, ["drain", "backtest", "--since", "60d"], env=_env(store)).output
    assert text.startswith("policy rules (") and "0 node(s) drained" in text
