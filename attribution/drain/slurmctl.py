"""Talking to slurmctld about nodes: their states, draining and resuming. Argument lists only, never a shell;
node names are validated before they reach scontrol."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from attribution.drain.policy import NodeState, valid_node_name
from attribution.errors import AttributionError
from attribution.scope.slurm import parse_scontrol_job


class SlurmError(AttributionError):
    pass


@dataclass(frozen=True)
class Scontrol:
    path: str = "/usr/bin/scontrol"
    timeout: float = 15.0
    env: dict | None = None

    def _run(self, args: list[str]) -> str:
        try:
            r = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=self.timeout,
                               env=self.env, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"scontrol {' '.join(args[:2])}: {exc}") from None
        if r.returncode != 0:
            err = (r.stderr or r.stdout).strip().splitlines()
            raise SlurmError(f"scontrol {' '.join(args[:2])}: {err[0] if err else f'exit {r.returncode}'}")
        return r.stdout

    def cluster_name(self) -> str | None:
        for line in self._run(["show", "config"]).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName":
                return value.strip() or None
        return None

    def nodes(self) -> dict[str, NodeState]:
        out = {}
        for line in self._run(["show", "node", "-o"]).splitlines():
            if not line.strip():
                continue
            info = parse_scontrol_job(line)
            name = info.get("NodeName")
            if not name:
                continue
            reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in line else None
            out[name] = NodeState(name, info.get("State", "UNKNOWN"), reason)
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
