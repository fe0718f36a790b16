"""Talking to slurmctld about nodes: their states, draining and resuming. Argument lists only, never a shell;
node names are validated before they reach scontrol."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone

from attribution.drain.policy import NodeState, valid_node_name
from attribution.errors import AttributionError
from attribution.scope.slurm import parse_scontrol_job


class SlurmError(AttributionError):
    pass


def slurm_time(value: str | None) -> datetime | None:
    """A time as `scontrol` prints it (`2026-12-02T03:15:40`, in the zone of its TZ: UTC, see Scontrol._run);
    None for `None`, `Unknown` or anything else."""
    try:
        return datetime.strptime((value or "").strip(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def node_state_of_line(line: str) -> NodeState | None:
    """One line of `scontrol show node -o`: the state, the reason with who set it and when (`Reason=Epilog error
    [root@2026-11-30T08:33:14]`, the last field, which may hold spaces), BootTime and SlurmdStartTime."""
    if not line.strip():
        return None
    info = parse_scontrol_job(line)
    name = info.get("NodeName")
    if not name:
        return None
    reason = user = at = None
    if " Reason=" in line:
        reason = line.split(" Reason=", 1)[1].rstrip()
        head, sep, stamp = reason.rpartition(" [")
        if sep and stamp.endswith("]") and "@" in stamp:
            reason = head
            who, _, when = stamp[:-1].partition("@")
            user, at = who or None, slurm_time(when)
        reason = reason or None
    return NodeState(name, info.get("State", "UNKNOWN"), reason, user, at, slurm_time(info.get("BootTime")),
                     slurm_time(info.get("SlurmdStartTime")))


def run_slurm(path: str, args: list[str], timeout: float, env: dict | None = None, utc: bool = False) -> str:
    """A Slurm client command (scontrol, sacctmgr) with `args`, no shell, within `timeout`: its output, or
    SlurmError with the first line it printed."""
    name = os.path.basename(path)
    if utc:  # scontrol prints times in its local zone, without saying which: make that UTC
        env = {**(os.environ if env is None else env), "TZ": "UTC"}
    try:
        r = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{name} {' '.join(args[:2])}: {exc}") from None
    if r.returncode != 0:
        err = (r.stderr or r.stdout).strip().splitlines()
        raise SlurmError(f"{name} {' '.join(args[:2])}: {err[0] if err else f'exit {r.returncode}'}")
    return r.stdout


@dataclass(frozen=True)
class Scontrol:
    path: str = "/usr/bin/scontrol"
    timeout: float = 15.0
    env: dict | None = None

    def _run(self, args: list[str], utc: bool = False) -> str:
        return run_slurm(self.path, args, self.timeout, self.env, utc)

    def cluster_name(self) -> str | None:
        for line in self._run(["show", "config"]).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName":
                return value.strip() or None
        return None

    def nodes(self) -> dict[str, NodeState]:
        out = {}
        for line in self._run(["show", "node", "-o"], utc=True).splitlines():
            n = node_state_of_line(line)
            if n is not None:
                out[n.name] = n
        return out

    def drain(self, node: str, reason: str) -> None:
        self._check(node)
        self._run(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self._check(node)
        self._run(["update", f"NodeName={node}", "State=RESUME"])

    @staticmethod
    def _check(node: str) -> None:
        if not valid_node_name(node):
            raise SlurmError(f"refusing node name {node!r}: not a valid Slurm node name")
