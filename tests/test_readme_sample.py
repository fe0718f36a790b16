"""The README's sample output is what the command really prints: every line of the sample is a line of a real run
(a line may be cut short with ' ...')."""

from __future__ import annotations

import re
import shlex

from click.testing import CliRunner

from attribution.cli import main

from tests.conftest import ROOT


def test_the_readme_sample_is_real_output():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```\n\$ (attribution [^\n]+)\n(.*?)```", readme, re.S)
    assert block, "the README has a sample run"
    args = shlex.split(block.group(1))[1:]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    real = r.output.splitlines()
    shown = block.group(2).rstrip("\n").splitlines()
    assert len(shown) >= 5
    for line in shown:
        if line.endswith(" ..."):
            assert any(out.startswith(line[:-4]) for out in real), line
        else:
            assert line in real, line
