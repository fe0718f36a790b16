"""The Slurm versions every real-Slurm test runs on, and a cluster factory for each (tests/conftest.py's
``slurm`` fixture). 22.05 is the host's Debian 12 Slurm; 24.11 runs inside the cached Debian 13 root
(tests/harness/debroot.py), on ports 10000 above 22.05's, so both may run at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .slurm import SlurmCluster

HOST_VERSION = "22.05"
ROOT_VERSION = "24.11"
#: Parameters of the module-scoped ``slurm`` fixture: the 24.11 runs carry the marker ``slurm24``.
PARAMS = [pytest.param(HOST_VERSION, id="slurm22"),
          pytest.param(ROOT_VERSION, id="slurm24", marks=pytest.mark.slurm24)]
PORT_OFFSET = {HOST_VERSION: 0, ROOT_VERSION: 10000}
DEFAULT_PORTS = dict(slurmctld_port=16817, slurmdbd_port=16818, node_ports=(17001, 17002), mysql_port=13306,
                     restd_port=16820)


@dataclass
class SlurmVersion:
    """One Slurm under test: ``cluster(base, ...)`` makes a SlurmCluster with the version's ports and root."""

    version: str
    root: Path | None = None
    binds: list[Path] = field(default_factory=list)
    manifest: dict | None = None

    @property
    def offset(self) -> int:
        return PORT_OFFSET[self.version]

    def ports(self, **ports) -> dict:
        p = {**DEFAULT_PORTS, **ports}
        return {k: tuple(x + self.offset for x in v) if isinstance(v, tuple) else v + self.offset
                for k, v in p.items()}

    def cluster(self, base_dir: Path, *args, **kwargs) -> SlurmCluster:
        port_names = set(DEFAULT_PORTS)
        ports = self.ports(**{k: v for k, v in kwargs.items() if k in port_names})
        rest = {k: v for k, v in kwargs.items() if k not in port_names}
        if self.root is not None:
            rest.setdefault("root", self.root)
            rest.setdefault("binds", self.binds)
        return SlurmCluster(base_dir, *args, **ports, **rest)

    def clients(self, cluster: SlurmCluster, directory: Path) -> Path:
        """A directory of `sacct`, `sacctmgr`, `scontrol`, `sbatch`, `sinfo` for this cluster's Slurm, to put first
        on PATH (inside the root for 24.11; the host's own for 22.05)."""
        directory.mkdir(parents=True, exist_ok=True)
        for name in ("sacct", "sacctmgr", "scontrol", "sbatch", "sinfo", "squeue", "scancel"):
            p = directory / name
            if cluster.runner is not None:
                cluster.runner.wrapper(p, f"/usr/bin/{name}")
            else:
                p.write_text(f"#!/bin/sh\nexec /usr/bin/{name} \"$@\"\n")
                p.chmod(0o755)
        return directory
