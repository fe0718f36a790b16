"""What the routes of one worker process share: settings, rule set, engines, tokens and the lanes that bound
blocking work. Built by `build_service` from Settings; nothing here is global."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from attribution.config import ServiceSettings, Settings
from attribution.rulepack.values import RuleSet
from attribution.api.auth import TokenTable
from attribution.api.blocking import Lane
from attribution.api.jobactions import JobActor
from attribution.api.jobgate import JobGate
from attribution.api.metrics import ServiceMetrics
from attribution.api.settle import Settle


@dataclass(frozen=True)
class Service:
    settings: ServiceSettings
    ruleset: RuleSet
    engine: Engine  # ingest and reads; pool size = the db lane's slots
    probe_engine: Engine  # /readyz only, so a busy pool never makes the service look dead
    tokens: TokenTable
    db: Lane
    cpu: Lane  # diagnosing uploaded bundles
    parse: Lane  # decoding and validating JSON request bodies (api.bodies)
    jobs: JobGate  # one report per job at a time in this process
    metrics: ServiceMetrics | None = None  # GET /metrics (api.metrics); None: not counted
    settle: Settle = field(default_factory=lambda: Settle(0.0))  # a job's verdict at most once per settle interval
    acting: JobActor | None = None  # what a verdict makes the service do in Slurm (job_actions:); None: nothing

    def dispose(self) -> None:
        self.engine.dispose()
        self.probe_engine.dispose()


def build_service(settings: Settings, ruleset: RuleSet, tokens: TokenTable) -> Service:
    """Engines on the configured database (or the embedded one, which must already run: `attribution serve`
    starts it) and the lanes sized from settings.service."""
    from attribution.store.db import make_engine, resolve_target

    svc = settings.service
    target = resolve_target(settings)
    engine = make_engine(target, settings, application_name="attribution-service", pool_size=svc.db_pool_size)
    probe = make_engine(target, settings, application_name="attribution-service-probe", pool_size=1)
    return Service(
        settings=svc, ruleset=ruleset, engine=engine, probe_engine=probe, tokens=tokens,
        db=Lane("database", svc.db_pool_size, svc.request_timeout_seconds),
        cpu=Lane("diagnose", svc.diagnose_concurrency, svc.request_timeout_seconds),
        # as many bodies parsed at once as can be ingested at once: a body waits for its turn, not in memory
        parse=Lane("body parsing", svc.db_pool_size, svc.request_timeout_seconds),
        jobs=JobGate(),
        metrics=ServiceMetrics.create(),
        settle=Settle(svc.settle_seconds),
        acting=JobActor.of(settings),
    )
