"""attribution/cli/alerts.py: `alerts send --dry-run --json` says what would be sent, sends nothing and moves no
cursor (the sinks themselves: tests/alerts/test_alerts.py)."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.pipeline.ingest import ingest_bundle

from tests.conftest import INCIDENTS


def test_a_dry_run_in_json_lists_the_alerts_and_a_second_one_lists_them_again(ruleset, store, tmp_path):
    for name in ("01-xid79-fallen-off-bus", "04-xid74-nvlink", "07-app-python-keyerror"):
        ingest_bundle(ruleset, store, INCIDENTS / name)
    config = tmp_path / "config.yaml"
    # a sink nobody listens on: a dry run never calls it
    config.write_text(yaml.safe_dump({"database": {"url": store.url.render_as_string(hide_password=False)},
                                      "alerts": {"sinks": [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}]}}))
    runs = [CliRunner().invoke(main, ["--config", str(config), "alerts", "send", "--dry-run", "--json"])
            for _ in range(2)]
    for r in runs:
        assert r.exit_code == 0, r.output
    first, second = (json.loads(r.stdout) for r in runs)
    assert first == second  # nothing sent, no cursor moved
    assert first["dry_run"] is True and first["failed"] == [] and first["suppressed"] == 0
    assert sorted(a["labels"]["outcome"] for a in first["alerts"]) == ["gpu_hardware", "nvlink"]
    nvlink = next(a for a in first["alerts"] if a["labels"]["outcome"] == "nvlink")
    assert nvlink["event"] == "verdict" and nvlink["labels"]["node"] == "kes-n203"
    assert nvlink["details"]["job_id"] == "90417" and nvlink["summary"].startswith("nvlink on kestrel/kes-n203")
    assert "would send" not in runs[0].stdout
