"""The service's own metrics at GET /metrics, in Prometheus' text format (prometheus_client).

What the service counts as it works (every worker process adds to the same numbers: `attribution serve` gives
the workers one multiprocess directory, PROMETHEUS_MULTIPROC_DIR):

    attribution_http_requests_total{route,method,status}   requests by route template (never the raw path)
    attribution_http_request_seconds{route}                 their duration
    attribution_reports_stored_total{source}                observation batches and contexts stored
    attribution_attribution_seconds                         storing a report and re-attributing its job
    attribution_verdicts_total{outcome}                     verdicts the service's reports led to
    attribution_reports_refused_total{reason}               reports refused: malformed, or naming a cluster or
                                                            node their token may not speak for

and what the database says at scrape time (so every worker answers the same):

    attribution_jobs_recent{outcome}                        jobs that ended in the last 24 hours, by outcome
    attribution_drain_actions{decision}                     drain decisions recorded, by decision
    attribution_jobs_pending_attribution                    jobs whose evidence is newer than their verdict

/metrics needs no token, like the probes, and names no job, user or node. Nothing is created at import time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass
class ServiceMetrics:
    """The service's counters and histograms; one per worker process (their files are shared when multiprocess)."""

    registry: Any = field(repr=False)  # the registry that the metrics live in (None: multiprocess files)
    requests: Any = field(repr=False)
    request_seconds: Any = field(repr=False)
    reports: Any = field(repr=False)
    attribution_seconds: Any = field(repr=False)
    verdicts: Any = field(repr=False)
    refused: Any = field(repr=False)

    #: every label value a counter can take, each counter's series made at zero before the first report (a
    #: rate() over a series that appears only with its first increment misses that increment)
    SOURCES = ("node", "controller", "api", "connector", "sacct")
    REFUSALS = ("malformed", "cluster", "node")

    @classmethod
    def create(cls) -> "ServiceMetrics":
        from prometheus_client import CollectorRegistry, Counter, Histogram

        # multiprocess: values go to files in $PROMETHEUS_MULTIPROC_DIR, collected at scrape; else one registry
        registry = None if os.environ.get(MULTIPROC_ENV) else CollectorRegistry()
        kw = {"registry": registry}
        return cls(
            registry=registry,
            requests=Counter("attribution_http_requests", "HTTP requests by route template, method and status",
                             ["route", "method", "status"], **kw),
            request_seconds=Histogram("attribution_http_request_seconds", "HTTP request duration", ["route"],
                                      buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30), **kw),
            reports=Counter("attribution_reports_stored", "Reports (observation batches, contexts) stored",
                            ["source"], **kw),
            attribution_seconds=Histogram("attribution_attribution_seconds",
                                          "Storing one report and re-attributing its job",
                                          buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60), **kw),
            verdicts=Counter("attribution_verdicts", "Verdicts the reports led to, by outcome", ["outcome"], **kw),
            refused=Counter("attribution_reports_refused", "Reports refused: malformed, or naming a cluster or node "
                            "their token may not speak for", ["reason"], **kw),
        ).zeroed()

    def zeroed(self) -> "ServiceMetrics":
        from attribution.model import OUTCOMES

        for source in self.SOURCES:
            self.reports.labels(source)
        for outcome in OUTCOMES:
            self.verdicts.labels(outcome)
        for reason in self.REFUSALS:
            self.refused.labels(reason)
        return self

    def exposition(self, engine) -> bytes:
        """The text a scrape gets: this process's (or every worker's) metrics and the database's gauges."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry()
        if self.registry is None:
            from prometheus_client import multiprocess

            multiprocess.MultiProcessCollector(registry)
        else:
            for collector in (self.requests, self.request_seconds, self.reports, self.attribution_seconds,
                              self.verdicts, self.refused):
                registry.register(collector)
        registry.register(StoreCollector(engine))
        return generate_latest(registry)


class StoreCollector:
    """Gauges read from the database at scrape time."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily
        from sqlalchemy import text

        up = GaugeMetricFamily("attribution_store_up", "The database answered the scrape's queries")
        try:
            with self.engine.connect() as c:
                recent = c.execute(text(
                    "SELECT coalesce(v.outcome, 'not_attributed'), count(*) FROM attribution.jobs j "
                    "LEFT JOIN attribution.verdicts v ON v.job_id = j.job_id AND v.id = j.current_verdict_id "
                    "WHERE coalesce(j.end_time, j.start_time) >= now() - interval '24 hours' GROUP BY 1")).all()
                drains = c.execute(text(
                    "SELECT decision, count(*) FROM attribution.drain_actions GROUP BY 1")).all()
                pending = c.execute(text(
                    "SELECT count(*) FROM attribution.jobs WHERE evidence_seq > attributed_seq")).scalar()
        except Exception:  # noqa: BLE001 - a scrape must answer even when the database does not
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        g = GaugeMetricFamily("attribution_jobs_recent", "Jobs that ended in the last 24 hours, by outcome",
                              labels=["outcome"])
        for outcome, n in recent:
            g.add_metric([outcome], n)
        yield g
        d = GaugeMetricFamily("attribution_drain_actions", "Drain decisions recorded, by decision",
                              labels=["decision"])
        for decision, n in drains:
            d.add_metric([decision], n)
        yield d
        p = GaugeMetricFamily("attribution_jobs_pending_attribution",
                              "Jobs whose stored evidence is newer than their verdict")
        p.add_metric([], pending or 0)
        yield p


class RequestMetrics:
    """ASGI middleware counting every HTTP request by the route it matched (its template) and its status."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, routes) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes  # a callable giving the app's routes, for requests refused before routing (401)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}
        t0 = time.perf_counter()

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        finally:
            route = getattr(scope.get("route"), "path", None) or self._template(scope)
            self.metrics.requests.labels(route, scope.get("method", ""), str(status["code"])).inc()
            self.metrics.request_seconds.labels(route).observe(time.perf_counter() - t0)

    def _template(self, scope: Scope) -> str:
        from starlette.routing import Match

        for route in self.routes():
            if route.matches(scope)[0] == Match.FULL:
                return getattr(route, "path", "unmatched")
        return "unmatched"
