"""attribution/cli/hooks.py: `spool status` and its --json."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.node import spool


def test_spool_status_counts_the_pending_and_the_set_aside_in_text_and_json(tmp_path):
    folder = tmp_path / "spool"
    for n in range(3):
        spool.write(folder, {"n": n})
    (folder / "bad").mkdir()
    (folder / "bad" / "x.spool").write_bytes(b"not one")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"home": str(tmp_path / "home"), "spool_dir": str(folder)}))
    r = CliRunner().invoke(main, ["--config", str(config), "spool", "status"])
    assert r.exit_code == 0 and r.output == f"{folder}: 3 pending, 1 bad\n"
    r = CliRunner().invoke(main, ["--config", str(config), "spool", "status", "--json"])
    assert r.exit_code == 0 and json.loads(r.output) == {"spool": str(folder), "pending": 3, "bad": 1}
