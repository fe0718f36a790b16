"""The `attribution` command's entry point: the node agent's commands go straight to it, the rest to the CLI.

`attribution epilog ...` (what the Slurm hooks run) is handed to attribution.node.agent before click and the
command tree are imported: a hook run costs what the node agent costs, on any Python 3.9+. On Python older than
3.11 only the node agent's commands (`epilog`, `spool flush|status`, `nvml-snapshot`, `--version`) run; anything
else is refused with one line (the central side needs 3.11).
"""

from __future__ import annotations

import sys

#: commands the node agent answers (the same options as in the full CLI)
NODE_COMMANDS = ("epilog", "spool", "nvml-snapshot")
CENTRAL_PYTHON = (3, 11)


def _split(argv: list[str]) -> tuple[list[str], str | None]:
    """The global options before the command (--config X, --rules X) and the command's name."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--config", "--rules"):
            i += 2
        elif a.startswith(("--config=", "--rules=")):
            i += 1
        else:
            return argv[:i], (None if a.startswith("-") else a)
    return argv, None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _, command = _split(argv)
    if command in NODE_COMMANDS:
        from attribution.node.agent import main as node_main

        sys.exit(node_main(argv))
    if sys.version_info < CENTRAL_PYTHON:
        if argv == ["--version"]:
            from attribution.resources import version

            print(f"attribution {version()}")
            sys.exit(0)
        v = ".".join(map(str, sys.version_info[:3]))
        print(f"attribution: `{command or ' '.join(argv) or 'attribution'}` needs Python 3.11 or newer (this is "
              f"{v}); on this Python only the node agent runs: attribution epilog, attribution spool flush|status",
              file=sys.stderr)
        sys.exit(2)
    from attribution.cli import main as cli_main

    cli_main(args=argv, prog_name="attribution")


def script() -> None:
    """The `attribution` console script: main(); the node agent's commands end without the interpreter's teardown
    (freeing every object of the rule pack one by one: ~10 ms of a hook's CPU), once their output is flushed."""
    argv = sys.argv[1:]
    _, command = _split(argv)
    if command not in NODE_COMMANDS:
        main(argv)
        return
    from attribution.node.agent import fast_exit, main as node_main

    fast_exit(node_main(argv))


if __name__ == "__main__":
    script()
