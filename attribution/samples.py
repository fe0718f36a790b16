"""Metric samples as they come out of a time-series database (the value the PromQL collector returns and the
metric rules read), and counter snapshots as the node hooks take them (what collect.telemetry parses and the
counter rules read). Depends on nothing else of ours."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from attribution.frozen import Value, field


class MetricSeries(Value):
    """One time series over the job window: its metric name, its labels and its samples in time order."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    samples: tuple[tuple[float, float], ...] = ()  # (Unix seconds, value)
    origin: str = "prometheus"  # where it came from, for event locations

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "samples", tuple(sorted((float(t), float(v)) for t, v in self.samples)))

    def selector(self, names: tuple[str, ...] | None = None) -> str:
        """`NAME{a="x",b="y"}` with the given labels (all labels when None), for locations and messages."""
        keys = sorted(self.labels) if names is None else [n for n in names if n in self.labels]
        inner = ",".join(f'{k}="{self.labels[k]}"' for k in keys)
        return f"{self.name}{{{inner}}}"


class Snapshot(Value):
    """One phase's counters on one node. Keys: a GPU by its PCI id (`0000:3b:00`), a port as `mlx5_0/1`, a PCI
    device by its full bdf (`0000:3a:00.0`). `parents` maps a bdf to its upstream bridges (nearest first)."""

    phase: str
    gpus: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    gpu_info: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    ports: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    pci: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    parents: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    present: tuple[str, ...] = ()  # which of nvidia-smi, infiniband, pci the snapshot holds
    problems: tuple[str, ...] = ()
    #: GPUs (`0000:3b:00`) the GPU tool named as unreachable when it failed (nvidia-smi's "Unable to determine
    #: the device handle for GPU <bdf>: ..."; NVML's GPU-is-lost for a device): gone, though not counted
    lost: tuple[str, ...] = ()
    #: why a part is missing when its tool could not be used (NVML without the driver or without nvidia-ml-py):
    #: coverage notes, not problems
    gaps: tuple[str, ...] = ()
    #: what the GPU tool printed beside its document (its stderr, and warning lines on the stream that carries the
    #: document: "WARNING: infoROM is corrupted at gpu 0000:04:00.0", "No devices were found"), one per line:
    #: what the counter rules of trigger `said` read
    messages: tuple[str, ...] = ()

    def devices(self, kind: str) -> Mapping[str, Mapping[str, float]]:
        return {"gpu": self.gpus, "ib_port": self.ports, "pci": self.pci}[kind]

    def gpu_of(self, bdf: str) -> str | None:
        """The GPU (its PCI id without the function, `0000:3b:00`) that is `bdf` itself or sits below it."""
        bdf = bdf.lower()
        if _pci_id(bdf) in self.gpus:
            return _pci_id(bdf)
        for dev, ups in sorted(self.parents.items()):
            if bdf in ups and _pci_id(dev) in self.gpus:
                return _pci_id(dev)
        return None


def _pci_id(bdf: str) -> str:
    return bdf.lower().rsplit(".", 1)[0]
