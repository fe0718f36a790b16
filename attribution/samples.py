"""Metric samples as they come out of a time-series database: the value the PromQL collector returns and the
metric rules read. Depends on nothing else of ours."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True, slots=True)
class MetricSeries:
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
