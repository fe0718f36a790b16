"""The command line's edge (attribution/cli/__init__.py): a reader that stops reading ends a command well.

`attribution jobs | head -1` exited 1 (#32): click turns a write to a closed pipe into exit 1. Here the pipe's reader
is closed before the command starts, so its first write meets the closed pipe whatever the timing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.conftest import INCIDENTS


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "attribution.cli", *args], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("args", [("rules", "path"), ("--help",), ("jobs", "--help"), ("rules", "filter"),
                                  ("diagnose", str(INCIDENTS / "02-xid48-dbe-ecc-xid31"))],
                         ids=["a-command", "the-help", "a-command-help", "many-lines", "a-verdict"])
def test_output_nobody_reads_any_more_is_exit_0_and_no_message(args):
    r = _into_closed_pipe(*args)
    assert (r.returncode, r.stderr) == (0, "")


BROKEN_SOCKET = """
import sys
import attribution.resources

def broken():
    raise BrokenPipeError(32, "Broken pipe")

attribution.resources.rules_dir = broken
from attribution.cli import main
main(["rules", "path"])
"""


def test_a_broken_pipe_of_something_else_than_the_output_stays_an_error():
    """A webhook or the service closing its socket is a BrokenPipeError too: with the output still read, that one
    is not taken for the end of the reader (click exits 1 on it)."""
    r = subprocess.run([sys.executable, "-c", BROKEN_SOCKET], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
