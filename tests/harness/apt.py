"""Installing the Debian packages a test needs (as root), one way for every harness: wait for apt's locks (another
apt run on the machine: unattended upgrades, a second suite) instead of failing at once, and run `apt-get update`
only when the first try fails (a fresh machine's package lists may be missing or stale)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

#: how long apt waits for a lock another apt holds (seconds), for installs and for the update
LOCK_WAIT = ["-o", "DPkg::Lock::Timeout=900"]
TIMEOUT = 1800


@dataclass(frozen=True)
class Result:
    returncode: int
    output: str  # the install's stdout and stderr, with the update's before it when one ran
    command: str


def environment(extra_env: dict | None = None) -> dict:
    """apt's environment: ours, non-interactive, with the caller's additions (which may say the same again)."""
    return {**os.environ, "DEBIAN_FRONTEND": "noninteractive", **(extra_env or {})}


def install(packages: list[str], extra_env: dict | None = None) -> Result:
    env = environment(extra_env)
    cmd = ["apt-get", *LOCK_WAIT, "install", "-y", "--no-install-recommends", *packages]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    output = r.stdout + r.stderr
    if r.returncode != 0:
        u = subprocess.run(["apt-get", *LOCK_WAIT, "update"], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        output = f"apt-get update exited {u.returncode}\n{u.stdout}{u.stderr}\n{r.stdout}{r.stderr}"
    return Result(r.returncode, output, " ".join(cmd))
