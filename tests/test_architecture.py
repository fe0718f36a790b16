"""Which part may use which (docs/architecture.md): the import-linter contracts in pyproject.toml (one layered
contract, the node collector's) hold, and they fail when a forbidden import is added; the node collector loads the
standard library only."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

from tests.conftest import ROOT

LINT = Path(sys.executable).with_name("lint-imports")
LAYERS = "The layers of the pipeline"
NODE = "The node collector is the standard library only"


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def _broken(report: str) -> str:
    """The names of the broken contracts in lint-imports' summary ("<name> KEPT" / "<name> BROKEN", wrapped)."""
    summary = report.split("dependencies.", 1)[1].split("Contracts:", 1)[0]
    parts = re.split(r"\s(KEPT|BROKEN)(?: \(\d+ ignored imports?\))?\n", " ".join(summary.split("\n-")[-1:]))
    return " | ".join(" ".join(n.split()) for n, s in zip(parts[::2], parts[1::2]) if s == "BROKEN")


def _contract(contract_id: str) -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["id"] == contract_id)


def test_the_package_keeps_every_contract():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout, r.stdout


def test_the_contracts_are_one_layering_and_the_node_s_without_exceptions():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert sorted(c["type"] for c in config["contracts"]) == ["forbidden", "layers"]
    assert not any(c.get("ignore_imports") for c in config["contracts"])
    assert _contract("layers")["exhaustive"] is True


def test_the_node_contract_names_every_third_party_package_the_project_imports():
    graph = grimp.build_graph("attribution", include_external_packages=True)
    third_party = {m for m in graph.modules if "." not in m and m != "attribution" and m not in sys.stdlib_module_names}
    assert third_party  # the project does import some (yaml, sqlalchemy, ...): the graph holds its externals
    assert third_party <= set(_contract("node")["forbidden_modules"])


def test_the_node_agent_loads_the_standard_library_only():
    """In a fresh interpreter without site-packages on its path: importing the agent and every module of the node
    package loads nothing but the standard library, the root package and attribution.node."""
    code = ("import importlib, json, pkgutil, sys\n"
            "before = set(sys.modules)\n"
            "import attribution.node.agent\n"
            "import attribution.node as node\n"
            "for m in pkgutil.iter_modules(node.__path__):\n"
            "    importlib.import_module('attribution.node.' + m.name)\n"
            "print(json.dumps(sorted(set(sys.modules) - before)))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)
    assert "attribution.node.agent" in loaded and "attribution.node.post" in loaded
    ours = ("attribution", "attribution.node")
    assert [m for m in loaded if m not in ours and not m.startswith("attribution.node.")
            and m.split(".")[0] not in sys.stdlib_module_names] == []


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "attribution", tmp_path / "attribution",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("module, line, contracts", [
    ("extract/events.py", "from attribution.store import writer", [LAYERS]),
    ("correlate/rootcause.py", "from attribution.pipeline import diagnose", [LAYERS]),
    ("model.py", "from attribution.rulepack import values", [LAYERS]),
    ("collect/kernel.py", "from attribution.extract import events", [LAYERS]),
    ("collect/kernel.py", "from attribution.rulepack import values", [LAYERS]),
    ("scope/schedulers.py", "from attribution.collect import kubelogs", [LAYERS]),
    ("config/sections.py", "from attribution.alerts import dispatch", [LAYERS]),
    ("rulepack/load.py", "from attribution.extract import events", [LAYERS]),
    ("replay/keep.py", "from attribution.pipeline import ingest", [LAYERS]),
    ("drain/policy.py", "from attribution.replay import keep", [LAYERS]),  # independent siblings
    ("extract/events.py", "from attribution.correlate import rootcause", [LAYERS]),
    ("store/reads.py", "from attribution.cli import diagnose", [LAYERS]),
    ("store/reads.py", "from attribution.alerts import dispatch", [LAYERS]),
    ("pipeline/diagnose.py", "from attribution.api import app", [LAYERS]),
    ("cli/diagnose.py", "from attribution import entry", [LAYERS]),
    ("frozen.py", "from attribution.node import document", [LAYERS]),
    ("node/spool.py", "from attribution.store import models", [LAYERS, NODE]),
    ("node/post.py", "from attribution.errors import InputError", [LAYERS, NODE]),
    ("node/agent.py", "import yaml", [NODE]),
    ("node/logs.py", "import sqlalchemy", [NODE]),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contracts):
    root = _copy(tmp_path)
    path = root / "attribution" / module
    path.write_text(path.read_text() + f"\n{line}  # added by the test\n")
    r = _lint(root)
    assert r.returncode != 0
    broken = _broken(r.stdout)
    assert [c for c in (LAYERS, NODE) if c in broken] == contracts, r.stdout
    assert f"attribution.{module[:-3].replace('/', '.')} -> " in r.stdout  # the added import is named
