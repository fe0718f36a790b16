"""The reporting endpoints (scope `report`): observation batches from the hooks, job contexts from the
controller or a connector. Both are idempotent and re-attribute the job from everything stored for it."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request

from attribution.api.auth import Principal
from attribution.api.bodies import parsed_body, request_body
from attribution.api.intake import Report, context_report, ingest_report, parse_report
from attribution.timeparse import format_utc
from attribution.api.schemas import ERROR_RESPONSES, IngestOut, JobContextDoc, JobRefOut, Name, ObservationBatch, ReportSource
from attribution.api.security import policy, require
from attribution.api.service import Service

#: The models of the bodies these routes read themselves (api.bodies: parsed off the event loop).
BODY_MODELS = (ObservationBatch, JobContextDoc)


def add_report_routes(app: FastAPI, svc: Service) -> None:
    reporter = [Depends(require("report"))]

    def bound(principal: Principal, report: Report) -> Report:
        if not principal.may_report(report.context.cluster):
            raise HTTPException(403, f"this token may report jobs of cluster {principal.cluster!r} only")
        return report

    async def store(report: Report) -> IngestOut:
        """Queue behind the job's other reports, then for a database connection: at most
        service.request_timeout_seconds in all (else 503, and the reporter retries or spools). The ingest itself
        is bounded by the database's statement and lock timeouts, and retries stop after the same time."""
        wait_until = time.monotonic() + svc.settings.request_timeout_seconds
        key = (report.context.cluster, report.context.job_id)
        async with svc.jobs.hold(key, svc.settings.request_timeout_seconds):
            return await svc.db.run(ingest, report, lambda: not svc.jobs.behind(key),
                                    wait_seconds=wait_until - time.monotonic())

    def ingest(report: Report, last_in_line) -> IngestOut:
        """Stores the report; attributes the job only when no other report of it waits behind this one in this
        worker (the last of a burst attributes everything stored: 512 node reports cost a few attributions, not
        512). One waiting behind that gives up (503 after the timeout) leaves the job pending: the next report,
        or the `attribution db attribute-pending` timer, attributes it."""
        started = time.monotonic()
        deadline = started + svc.settings.request_timeout_seconds
        result, verdict = ingest_report(svc.ruleset, svc.engine, report, deadline=deadline,
                                        attribute=last_in_line())
        if svc.metrics is not None:
            svc.metrics.reports.labels(report.source).inc()
            svc.metrics.attribution_seconds.observe(time.monotonic() - started)
            if verdict is not None:
                svc.metrics.verdicts.labels(verdict.outcome).inc()
        job = result.job
        return IngestOut(job=JobRefOut(cluster=job.cluster, job_id=job.job_id, start=format_utc(job.start)),
                         new_events=result.new_events, linked_events=result.linked_events,
                         verdict_id=result.verdict_id, verdict_changed=result.verdict_changed,
                         outcome=verdict.outcome if verdict else None)

    @app.post("/v1/observations", response_model=IngestOut, dependencies=reporter, tags=["report"],
              openapi_extra={**policy("report"), **request_body(ObservationBatch)}, responses=ERROR_RESPONSES,
              summary="Store a batch of events and coverage for one job (the node or controller hook's payload)")
    async def post_observations(request: Request,
                                principal: Annotated[Principal, Depends(require("report"))]) -> IngestOut:
        """Idempotent: posting the same batch again stores nothing new. Re-attributes the job; the answer says
        whether its current verdict changed."""
        report = await parsed_body(request, ObservationBatch, svc.parse, lambda batch: parse_report(
            batch.model_dump(exclude_none=True), max_events=svc.settings.max_events))
        return await store(bound(principal, report))

    @app.post("/v1/jobs/{cluster}/{job_id}/context", response_model=IngestOut, dependencies=reporter,
              tags=["report"], openapi_extra={**policy("report"), **request_body(JobContextDoc)},
              responses=ERROR_RESPONSES, summary="Store a job's execution context (state, exit code, nodes, times)")
    async def post_context(request: Request, cluster: Annotated[Name, Path()], job_id: Annotated[Name, Path()],
                           source: Annotated[ReportSource, Query(
                               description="who knows this context; a controller's or connector's context "
                                           "wins over a node's")] = "api",
                           principal: Principal = Depends(require("report"))) -> IngestOut:
        """The scheduler's word on the job (its final state, a failed node) counts as evidence, as it does when
        the controller hook reports. Idempotent."""
        if not principal.may_report(cluster):
            raise HTTPException(403, f"this token may report jobs of cluster {principal.cluster!r} only")
        report = await parsed_body(request, JobContextDoc, svc.parse, lambda doc: context_report(
            svc.ruleset, doc.model_dump(exclude_none=True), cluster, job_id, source))
        return await store(report)
