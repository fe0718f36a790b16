"""Running an external command (sacct, scontrol, kubectl) within a time limit, its output spooled to a temporary
file so that a large answer (a pod's whole log) never has to fit in memory."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from typing import IO, Mapping, Sequence

STDERR_KEEP = 4096


@dataclass
class CommandResult:
    returncode: int | None  # None: it did not run or was killed at the time limit
    stdout: IO[bytes]  # positioned at the start; the caller closes it
    stderr: str
    error: str | None = None  # why it did not run or did not finish

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def reason(self, what: str) -> str:
        if self.error:
            return f"{what}: {self.error}"
        first = next((ln.strip() for ln in self.stderr.splitlines() if ln.strip()), "")
        return f"{what}: exit {self.returncode}" + (f": {first[:300]}" if first else "")

    def text(self) -> str:
        data = self.stdout.read()
        self.stdout.seek(0)
        return data.decode("utf-8", errors="replace")


def run_command(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
    """Run `argv` (no shell); never raises for a missing program, a failure or a timeout."""
    out = tempfile.TemporaryFile()
    if timeout <= 0:
        return CommandResult(None, out, "", error="time budget exhausted")
    full_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=full_env, start_new_session=True)
    except FileNotFoundError:
        return CommandResult(None, out, "", error=f"{argv[0]}: command not found")
    except OSError as exc:
        return CommandResult(None, out, "", error=f"{argv[0]}: {exc.strerror or exc}")
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: children holding the pipes go too
        except OSError:
            proc.kill()
        proc.communicate()
        out.seek(0)
        return CommandResult(None, out, "", error=f"no answer within {timeout:.1f} s")
    out.seek(0)
    return CommandResult(proc.returncode, out, err[-STDERR_KEEP:].decode("utf-8", errors="replace"))


__all__ = ["CommandResult", "run_command"]
