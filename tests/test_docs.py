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
