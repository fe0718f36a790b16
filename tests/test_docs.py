"""Docs are tested like code: every command, view and setting is documented, and the README's two commands
are the ones the scripts and CI run."""

from __future__ import annotations

import re

import click

from attribution.cli import main
from attribution.config import DatabaseSettings, EpilogSettings, JobActionSettings, ServiceSettings, Settings

from tests.conftest import ROOT


def _docs_text() -> str:
    parts = [ROOT / "README.md", ROOT / "hooks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text() for p in parts)


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    out = []
    for name, cmd in group.commands.items():
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out += _commands(cmd, full + " ")
        else:
            out.append(full)
    return out


def test_every_command_is_documented():
    text = _docs_text()
    missing = []
    for cmd in _commands(main):
        words = cmd.split()
        # "db upgrade" may be written "attribution db upgrade" or in a table as "`db upgrade`"
        pattern = r"\b" + r"\s+(?:[`/|]\s*)?".join(map(re.escape, words)) + r"\b"
        if not re.search(pattern, text) and not (len(words) == 2 and re.search(
                rf"attribution {re.escape(words[0])}\b[^\n]*\b{re.escape(words[1])}\b", text)):
            missing.append(cmd)
    assert missing == []


def test_every_json_output_is_documented_in_the_cli_doc():
    """docs/cli.md lists the document each command's --json prints."""
    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc.split("## JSON", 1)[1].split("\n## ", 1)[0]
    first_cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    named = {n for cell in first_cells for n in re.findall(r"`([a-z -]+)`", cell)}
    with_json = [cmd for cmd in _commands(main) if "--json" in _options(main, cmd.split())]
    assert len(with_json) >= 17
    assert [cmd for cmd in with_json if cmd not in named] == []


def _options(group: click.Group, words: list[str]) -> set[str]:
    cmd = group
    for w in words:
        cmd = cmd.commands[w]
    return {o for p in cmd.params for o in getattr(p, "opts", [])}


def test_the_deploy_guide_installs_and_enables_every_shipped_unit():
    """#32: docs/deploy.md described the prune and drain-sync units but its commands left them out."""
    blocks, block = [], None
    for line in (ROOT / "docs" / "deploy.md").read_text().splitlines():
        if line.strip().startswith("```"):
            block = [] if block is None else blocks.append("\n".join(block))
        elif block is not None:
            block.append(line)
    copied = " ".join(b for b in blocks if "cp hooks/systemd/" in b)
    enabled = " ".join(b for b in blocks if "systemctl enable" in b)
    units = sorted(p.name for p in (ROOT / "hooks" / "systemd").iterdir())
    assert len(units) >= 11
    for unit in units:
        stem = unit.rsplit(".", 1)[0]
        assert f"hooks/systemd/{unit}" in copied or f"hooks/systemd/{stem}.*" in copied, unit
        timer = f"{stem}.timer"
        if unit.endswith(".timer"):
            assert re.search(rf"\b{re.escape(timer)}\b", enabled), unit
        elif timer not in units:  # a service without a timer runs by itself
            assert re.search(rf"\b{re.escape(stem)}\b(?!-)", enabled), unit


def test_every_view_is_documented():
    store_doc = (ROOT / "docs" / "store.md").read_text()
    for sql in (ROOT / "sql").glob("*.sql"):
        view = re.search(r"CREATE VIEW attribution\.(\w+)", sql.read_text()).group(1)
        assert f"attribution.{view}" in store_doc, view


def test_every_setting_is_documented():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for cls in (Settings, DatabaseSettings, EpilogSettings, ServiceSettings, JobActionSettings):
        for name in cls.__dataclass_fields__:
            if name in ("source",):
                continue
            assert re.search(rf"\b{name}:", doc), f"{cls.__name__}.{name}"


def test_readme_quick_start_is_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()]
    assert commands == ["scripts/demo", "scripts/test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test" in ci


def test_every_rule_file_type_is_documented():
    from attribution.rulepack.yamlload import FILE_TYPES

    doc = (ROOT / "docs" / "rules.md").read_text()
    for ftype in FILE_TYPES:
        assert f"`{ftype}`" in doc, ftype
