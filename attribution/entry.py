"""The `attribution` command's entry point: the central commands (Python 3.11+, `attribution[all]`).

A compute node runs the node collector, `attribution-node` (standard library only, Python 3.9+); the base
install carries nothing else. Where the central side cannot run (an older Python, or the base install without the
engine's extras), `attribution --help`, `--version` and `rules path` still answer, and any other command is
refused with one line saying what it needs.
"""

from __future__ import annotations

import sys

CENTRAL_PYTHON = (3, 11)
#: A module of each extra the central commands need (the `engine` extra: the rule pack and the command line)
CENTRAL_MODULES = ("click", "yaml", "jsonschema", "pydantic")

USAGE = """Usage: attribution [--config FILE] [--rules DIR] COMMAND [ARGS]...

  attribution: for every failed GPU training job, what actually broke.

  {why}

  What answers here:
    attribution --version      this install's version
    attribution rules path     where the shipped rule pack is
  On a compute node the Slurm hooks run the node collector:
    attribution-node epilog    collect this node's evidence of a job and report it (what hooks/epilog runs)
    attribution-node spool flush|status
"""


def _missing() -> str | None:
    """Why the central commands cannot run here, or None."""
    if sys.version_info < CENTRAL_PYTHON:
        v = ".".join(map(str, sys.version_info[:3]))
        return f"The central commands need Python 3.11 or newer (this is {v})."
    import importlib.util

    missing = [m for m in CENTRAL_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return (f"The central commands need attribution's engine ({', '.join(missing)} are not installed): "
                f"pip install 'attribution[all]'.")
    return None


def _command(argv: list[str]) -> str | None:
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--config", "--rules"):
            i += 2
        elif a.startswith(("--config=", "--rules=")):
            i += 1
        else:
            return None if a.startswith("-") else a
    return None


def limited(argv: list[str], why: str) -> int:
    """What the command answers without the central side."""
    from attribution.resources import rules_dir, version

    if argv in ([], ["--help"], ["-h"]):
        print(USAGE.format(why=why))
        return 0
    if argv == ["--version"]:
        print(f"attribution {version()}")
        return 0
    rest = argv[argv.index("rules") + 1:] if "rules" in argv else []
    if _command(argv) == "rules" and rest == ["path"]:
        print(rules_dir())
        return 0
    print(f"attribution: `{' '.join(argv)}`: {why}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    why = _missing()
    if why:
        sys.exit(limited(argv, why))
    from attribution.cli import main as cli_main

    cli_main(args=argv, prog_name="attribution")


def script() -> None:
    """The `attribution` console script."""
    main(sys.argv[1:])


if __name__ == "__main__":
    script()
