"""The service's side of `job_actions:` (docs/job-actions.md): once the service attributed a job, what the verdict
makes it do in Slurm (pipeline.jobactions.act_on_job: the owner's AdminComment, a requeue around the culprits),
off the request and one job at a time. A burst of attributions of one job (its nodes' reports) queues it once: the
run takes the verdict current by then. Only jobs of the cluster the service's Slurm client speaks for: the
configuration's `cluster`, else the one `scontrol show config` names.
"""

from __future__ import annotations

import asyncio
import logging

from attribution.api.blocking import Lane

LOG = logging.getLogger("attribution.api")


class JobActor:
    def __init__(self, settings, cluster: str | None) -> None:
        from attribution.act.slurmjob import from_settings

        self.settings = settings  # config.JobActionSettings
        self.slurm = from_settings(settings)
        self.cluster = cluster
        self.lane = Lane("slurm", 1, 3600.0)
        self._queued: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task] = set()  # referenced until done (the loop keeps only weak references)

    @classmethod
    def of(cls, settings) -> "JobActor | None":
        ja = settings.job_actions
        return cls(ja, settings.cluster) if ja.admin_comment or ja.requeue else None

    def after_attribution(self, svc, cluster: str, job_id: str) -> None:
        """Queue the job's actions (once while it waits); called on the event loop after an attribution."""
        key = (cluster, job_id)
        if key in self._queued:
            return
        self._queued.add(key)
        task = asyncio.get_running_loop().create_task(self._run(svc, key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, svc, key: tuple[str, str]) -> None:
        try:
            await self.lane.run(self._act, svc, key)
        except Exception:  # a fault of ours or of the database: the next attribution of the job tries again
            self._queued.discard(key)
            LOG.warning("job actions of %s/%s failed", *key, exc_info=True)

    def _act(self, svc, key: tuple[str, str]) -> None:
        from attribution.pipeline.jobactions import act_on_job

        self._queued.discard(key)  # from here on, a newer verdict queues the job again
        cluster, job_id = key
        if self.cluster is None:
            self.cluster = self.slurm.cluster_name()
        if cluster != self.cluster:
            return
        words = act_on_job(svc.ruleset, svc.engine, self.settings, self.slurm, cluster, job_id, actor="service")
        if words:
            LOG.info("job actions of %s/%s: %s", cluster, job_id, "; ".join(words))
