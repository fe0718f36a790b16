"""The reporting endpoints (scope `report`): observation documents from the nodes and the controller, job
contexts from a connector. Both are idempotent and re-attribute the job from everything stored for it. A report
naming a cluster or node its token may not speak for is refused (403) and counted."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request

from attribution.api.auth import Principal
from attribution.api.bodies import json_body, parsed_body, request_body
from attribution.api.intake import Report, context_report, ingest_report
from attribution.timeparse import format_utc
from attribution.api.schemas import (ERROR_RESPONSES, ClusterPath, IngestOut, JobContextDoc, JobIdPath, JobRefOut,
                                     ObservationDocument, ReportSource)
from attribution.api.security import policy, require
from attribution.api.service import Service

#: The models of the bodies these routes read themselves (api.bodies: parsed off the event loop).
BODY_MODELS = (ObservationDocument, JobContextDoc)


def add_report_routes(app: FastAPI, svc: Service) -> None:
    reporter = [Depends(require("report"))]
    # the rule pack's Hyperscan databases, compiled when the worker starts (app.py's lifespan runs app.state.warm
    # in a thread): a worker's first reports are not the ones that wait for them
    app.state.warm = [*getattr(app.state, "warm", []), svc.ruleset.warm]

    def refuse(principal: Principal, cluster: str, nodes, role: str) -> None:
        why = principal.refusal(cluster, nodes, role)
        if why is not None:
            if svc.metrics is not None:
                svc.metrics.refused.labels(why[0]).inc()
            raise HTTPException(403, why[1])

    def decoded(doc):
        from attribution.errors import InputError
        from attribution.intake.codec import Bounds, decode

        try:
            return decode(doc, "report", Bounds(observations=svc.settings.max_events))
        except InputError:
            if svc.metrics is not None:
                svc.metrics.refused.labels("malformed").inc()
            raise

    async def store(report: Report) -> IngestOut:
        """Queue behind the job's other reports, then for a database connection: at most
        service.request_timeout_seconds in all (else 503, and the reporter retries or spools). The ingest itself
        is bounded by the database's statement and lock timeouts, and retries stop after the same time."""
        wait_until = time.monotonic() + svc.settings.request_timeout_seconds
        key = (report.context.cluster, report.context.job_id)
        async with svc.jobs.hold(key, svc.settings.request_timeout_seconds):
            out, pending = await svc.db.run(ingest, report, lambda: not svc.jobs.behind(key) and
                                            svc.settle.may_attribute(key), wait_seconds=wait_until - time.monotonic())
        if pending is not None:
            defer(key, *pending)
        if svc.acting is not None and out.outcome is not None:  # attributed: what it makes us do in Slurm
            svc.acting.after_attribution(svc, *key)
        return out

    def defer(key, ctx, job) -> None:
        """The attribution a settled report left for later: once, at the end of the job's settle interval."""
        import asyncio

        delay = svc.settle.delay(key)
        if delay is None:
            return

        async def later():
            from attribution.pipeline.ingest import attribute_pending

            try:
                await asyncio.sleep(delay)
                svc.settle.done(key)
                async with svc.jobs.hold(key, svc.settings.request_timeout_seconds):
                    done = await svc.db.run(attribute_pending, svc.ruleset, svc.engine, ctx, job,
                                            time.monotonic() + svc.settings.request_timeout_seconds)
                svc.settle.attributed(key)
                if svc.metrics is not None and done is not None:
                    svc.metrics.verdicts.labels(done[2].outcome).inc()
                if svc.acting is not None and done is not None:
                    svc.acting.after_attribution(svc, *key)
            except Exception:  # the job stays pending: the next report or the attribute-pending timer takes it
                svc.settle.done(key)
                import logging

                logging.getLogger("attribution.api").warning("deferred attribution of %s/%s failed", *key,
                                                             exc_info=True)

        asyncio.get_running_loop().create_task(later())

    def ingest(report: Report, may_attribute):
        """Stores the report; attributes the job only when no other report of it waits behind this one in this
        worker (the last of a burst attributes everything stored: 512 node reports cost a few attributions, not
        512) and this worker did not attribute it within the settle interval (api.settle: then one attribution is
        deferred to its end). One waiting behind that gives up (503 after the timeout) leaves the job pending:
        the next report, or the `attribution db attribute-pending` timer, attributes it. (the answer, and
        (context, job) of a deferred attribution or None)."""
        started = time.monotonic()
        deadline = started + svc.settings.request_timeout_seconds
        key = (report.context.cluster, report.context.job_id)
        behind = svc.jobs.behind(key)
        attribute = may_attribute()
        result, verdict = ingest_report(svc.ruleset, svc.engine, report, deadline=deadline, attribute=attribute)
        if attribute:
            svc.settle.attributed(key)
        if svc.metrics is not None:
            svc.metrics.reports.labels(report.source).inc()
            svc.metrics.attribution_seconds.observe(time.monotonic() - started)
            if verdict is not None:
                svc.metrics.verdicts.labels(verdict.outcome).inc()
        job = result.job
        out = IngestOut(job=JobRefOut(cluster=job.cluster, job_id=job.job_id, start=format_utc(job.start)),
                        new_events=result.new_events, linked_events=result.linked_events,
                        verdict_id=result.verdict_id, verdict_changed=result.verdict_changed,
                        outcome=verdict.outcome if verdict else None)
        # settled, with nobody behind it to attribute: one attribution at the end of the interval
        return out, ((report.context, job) if not attribute and not behind else None)

    @app.post("/v1/observations", response_model=IngestOut, dependencies=reporter, tags=["report"],
              openapi_extra={**policy("report"), **request_body(ObservationDocument)}, responses=ERROR_RESPONSES,
              summary="Store one job's observations from one reporter (a node's logs and counters, the controller's "
                      "view of the job)")
    async def post_observations(request: Request,
                                principal: Annotated[Principal, Depends(require("report"))]) -> IngestOut:
        """Idempotent: posting the same document again stores nothing new. Re-attributes the job; the answer says
        whether its current verdict changed."""
        from attribution.intake.codec import NodeReport, named_nodes
        from attribution.pipeline.intake import piece_of

        report = await json_body(request, svc.parse, decoded)
        refuse(principal, report.cluster, named_nodes(report),
               "node" if isinstance(report, NodeReport) else "controller")
        piece = await svc.parse.run(piece_of, svc.ruleset, report)
        return await store(Report(piece.context, piece.events, piece.coverage, piece.source,
                                  telemetry=piece.telemetry, evidence=piece.evidence))

    @app.post("/v1/jobs/{cluster}/{job_id}/context", response_model=IngestOut, dependencies=reporter,
              tags=["report"], openapi_extra={**policy("report"), **request_body(JobContextDoc)},
              responses=ERROR_RESPONSES, summary="Store a job's execution context (state, exit code, nodes, times)")
    async def post_context(request: Request, cluster: Annotated[ClusterPath, Path()],
                           job_id: Annotated[JobIdPath, Path()],
                           source: Annotated[ReportSource, Query(
                               description="who knows this context; a controller's or connector's context "
                                           "wins over a node's")] = "api",
                           principal: Principal = Depends(require("report"))) -> IngestOut:
        """The scheduler's word on the job (its final state, a failed node) counts as evidence, as it does when
        the controller hook reports. Idempotent."""
        refuse(principal, cluster, (), "controller")
        report = await parsed_body(request, JobContextDoc, svc.parse, lambda doc: context_report(
            svc.ruleset, doc.model_dump(exclude_none=True), cluster, job_id, source))
        refuse(principal, cluster, report.context.nodes, "controller")
        return await store(report)
