"""Acting on one job through Slurm's commands: its AdminComment, its requeue with nodes excluded. Argument lists,
never a shell (drain.slurmctl.run_slurm); the job id and the node names are checked before any command sees them.

Measured on Slurm 22.05.8 and 24.11.5 (docs/job-actions.md): `scontrol update JobId=N AdminComment=...` is
refused for a job that ended ("Job has already finished for job N"), inside EpilogSlurmctld too, while the job is
COMPLETING; `sacctmgr -i modify job where jobid=N set AdminComment=...` changes the newest accounting record of
the job id (what `sacct -o AdminComment` shows) when slurmdbd keeps accounting. `scontrol requeuehold N`, then
`scontrol update JobId=N ExcNodeList=... AdminComment=...` on the held job and `scontrol release N`, requeue
an ended job (COMPLETING or FAILED) that allows requeue without a moment in which it could start on the excluded
nodes; the pending job's comment is the one `scontrol show job` shows, and its next run's accounting record keeps
it. slurmrestd (24.11) answers 500 to an update of an ended job, as scontrol does: it is not used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from attribution.drain.policy import valid_node_name
from attribution.drain.slurmctl import SlurmError, run_slurm

#: a raw Slurm job id (docs/slurm.md: the store keys every job by it, an array task's and a het component's too)
JOB_ID = re.compile(r"^[0-9]{1,12}$")


@dataclass(frozen=True)
class SlurmJobs:
    scontrol: str = "/usr/bin/scontrol"
    sacctmgr: str = "/usr/bin/sacctmgr"
    timeout: float = 10.0
    env: dict | None = None

    def show(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o` of the job ({} when Slurm does not know it, or did not answer)."""
        from attribution.scope.scontrol import show_job

        return show_job(_checked(job_id), scontrol=self.scontrol, timeout=self.timeout)

    def cluster_name(self) -> str | None:
        for line in run_slurm(self.scontrol, ["show", "config"], self.timeout, self.env).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName":
                return value.strip() or None
        return None

    def set_admin_comment(self, job_id: str, text: str) -> str:
        """Set the job's AdminComment: on the live job while slurmctld may still change it (pending, running),
        else on its accounting record. Returns which did (`scontrol` or `sacctmgr`); SlurmError naming both
        refusals when neither could."""
        job_id = _checked(job_id)
        try:
            run_slurm(self.scontrol, ["update", f"JobId={job_id}", f"AdminComment={text}"], self.timeout, self.env)
            return "scontrol"
        except SlurmError as live:
            try:
                run_slurm(self.sacctmgr, ["-i", "modify", "job", "where", f"JobID={job_id}", "set",
                                          f"AdminComment={text}"], self.timeout, self.env)
                return "sacctmgr"
            except SlurmError as record:
                raise SlurmError(f"{live}; {record}") from None

    def requeue_excluding(self, job_id: str, exc_node_list: str, nodes, comment: str | None = None) -> None:
        """Requeue the ended job held, exclude `exc_node_list` (every node of it checked: `nodes`), set its
        comment, release it. When a step after the hold fails the job is released all the same (it runs again,
        perhaps on a culprit: said in the error), so a held job is never left behind."""
        job_id = _checked(job_id)
        bad = [n for n in nodes if not valid_node_name(n)]
        if bad:
            raise SlurmError(f"refusing node name {bad[0]!r}: not a valid Slurm node name")
        run_slurm(self.scontrol, ["requeuehold", job_id], self.timeout, self.env)
        update = ["update", f"JobId={job_id}", f"ExcNodeList={exc_node_list}"]
        if comment:
            update.append(f"AdminComment={comment}")
        try:
            run_slurm(self.scontrol, update, self.timeout, self.env)
        except SlurmError as exc:
            self._release(job_id)
            raise SlurmError(f"requeued without the exclusion: {exc}") from None
        self._release(job_id)

    def _release(self, job_id: str) -> None:
        try:
            run_slurm(self.scontrol, ["release", job_id], self.timeout, self.env)
        except SlurmError as exc:
            raise SlurmError(f"requeued and held, not released ({exc}): scontrol release {job_id}") from None


def from_settings(settings, timeout: float | None = None) -> SlurmJobs:
    """The commands of `job_actions:` (config.JobActionSettings); `timeout` bounds each call below its own."""
    t = settings.timeout_seconds if timeout is None else min(timeout, settings.timeout_seconds)
    return SlurmJobs(scontrol=settings.scontrol, sacctmgr=settings.sacctmgr, timeout=max(1.0, t))


def _checked(job_id: str) -> str:
    if not JOB_ID.match(str(job_id)):
        raise SlurmError(f"refusing job id {job_id!r}: not a raw Slurm job id")
    return str(job_id)


__all__ = ["SlurmJobs", "from_settings", "JOB_ID"]
