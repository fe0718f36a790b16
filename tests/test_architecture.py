"""Which part may use which (docs/architecture.md): the import-linter contracts in pyproject.toml hold, and they
fail when a forbidden import is added."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def _broken(report: str) -> str:
    """The names of the broken contracts in lint-imports' summary ("<name> KEPT" / "<name> BROKEN", wrapped)."""
    summary = report.split("dependencies.", 1)[1].split("Contracts:", 1)[0]
    parts = re.split(r"\s(KEPT|BROKEN)(?: \(\d+ ignored imports?\))?\n", " ".join(summary.split("\n-")[-1:]))
    return " | ".join(" ".join(n.split()) for n, s in zip(parts[::2], parts[1::2]) if s == "BROKEN")


def test_the_package_keeps_every_contract():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "attribution", tmp_path / "attribution",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("module, line, contract", [
    ("extract/events.py", "from attribution.store import writer", "extract and correlate use the model"),
    ("correlate/rootcause.py", "import subprocess", "extract and correlate use the model"),
    ("model.py", "from attribution.rulepack import values", "The model depends on nothing of ours"),
    ("collect/kernel.py", "from attribution.extract import events", "Collectors use the model"),
    ("store/reads.py", "from attribution.cli import diagnose", "The store uses the model"),
    ("node/spool.py", "from attribution.store import models", "The node agent never imports"),
    ("drain/policy.py", "import click", "Only the entry points"),
    ("replay/diff.py", "import pathlib", "Template mining and verdict comparison are pure"),
    ("replay/history.py", "from attribution.cli import main", "Only the entry points"),
    ("store/evidence.py", "from attribution.replay import keep", "The store uses the model"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    root = _copy(tmp_path)
    path = root / "attribution" / module
    path.write_text(path.read_text() + f"\n{line}  # added by the test\n")
    r = _lint(root)
    assert r.returncode != 0
    assert contract in _broken(r.stdout), r.stdout
    assert f"attribution.{module[:-3].replace('/', '.')} -> " in r.stdout  # the added import is named
