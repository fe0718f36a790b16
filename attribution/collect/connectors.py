"""The configured collectors of a live job (not a bundle): local files, Loki, Prometheus, and for a Kueue workload
the pods' logs. Each one reports coverage; a server that is down, slow or answers with errors leaves its coverage
records at `error` with the reason, within its own time budget, and the others still run.

Credentials are read (and a bad URL or credentials file refused, as a ConfigError) before anything is queried.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from attribution.config import ConnectorSettings
from attribution.scope.kueue import Workload
from attribution.samples import MetricSeries
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.httpclient import endpoint_from
from attribution.collect.kubelogs import collect_pod_logs
from attribution.collect.localfiles import collect_files
from attribution.collect.loki import collect_loki
from attribution.collect.promql import collect_metrics
from attribution.collect.scan import Prefilter

UTC = timezone.utc
LOOKBACK = timedelta(days=1)  # a window for a job whose start the scheduler did not record


@dataclass
class Collected:
    observations: list[Observation] = field(default_factory=list)
    series: list[MetricSeries] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)

    def add(self, obs: list[Observation], cov: list[Coverage]) -> None:
        self.observations.extend(obs)
        self.coverage.extend(cov)


def query_window(ctx: ExecutionContext, before: timedelta, after: timedelta,
                 now: datetime | None = None) -> tuple[datetime, datetime]:
    """The time range to ask servers about: the job's window with the causal graph's margins."""
    end = (ctx.end or now or datetime.now(UTC)) + after
    start = (ctx.start - before) if ctx.start else end - after - LOOKBACK
    return start, end


def collect_configured(connectors: ConnectorSettings, ctx: ExecutionContext, prefilter_for: Callable[[str], Prefilter],
                       metric_rules, window: tuple[datetime, datetime], workload: Workload | None = None,
                       keeper=None) -> Collected:
    """Run every configured collector for `ctx` over `window`; `keeper` (replay.keep.LineKeeper), when given,
    sees every text they read as it is parsed (what is kept for replay)."""
    loki = endpoint_from(connectors.loki, "loki") if connectors.loki.url else None
    prom = endpoint_from(connectors.prometheus, "prometheus") if connectors.prometheus.url else None
    out = Collected()
    start, end = window
    if connectors.files:
        out.add(*collect_files(connectors.files, ctx, prefilter_for, keeper))
    if workload is not None and workload.evidence:  # Kubernetes' own word on the run (rules/kubernetes.yaml)
        out.add(list(workload.evidence), [Coverage("scheduler", None, "ok", lines=len(workload.evidence),
                                                   file=f"workload/{workload.namespace}/{workload.name}")])
    if workload is not None and connectors.kubernetes.pod_logs:
        k = connectors.kubernetes
        out.add(*collect_pod_logs(k, workload.namespace, workload.pods, ctx, prefilter_for("job"),
                                  time.monotonic() + k.budget, keeper=keeper))
    if loki is not None:
        out.add(*collect_loki(loki, connectors.loki, ctx, prefilter_for, start, end,
                              time.monotonic() + connectors.loki.budget, keeper=keeper))
    if prom is not None and metric_rules:
        series, cov = collect_metrics(prom, connectors.prometheus, metric_rules, ctx, start, end,
                                      time.monotonic() + connectors.prometheus.budget)
        out.series.extend(series)
        out.coverage.extend(cov)
    kernel_sources = {f.source for f in connectors.files} | (set(connectors.loki.sources) if loki else set())
    if "kernel" not in kernel_sources:
        out.coverage.append(Coverage("kernel", None, "missing",
                                     reason="no collector configured for kernel logs (connectors.loki or "
                                            "connectors.files)"))
    return out


__all__ = ["Collected", "query_window", "collect_configured"]
