"""What attribution does to a failed job in Slurm once it has its verdict, when the configuration asks for it
(`job_actions:`, docs/job-actions.md): its owner told in the job's AdminComment (`notice`, pure), the job requeued
around its culprit nodes (`requeue`: the policy and the decision, pure), through Slurm's commands (`slurmjob`:
scontrol and sacctmgr, argument lists only)."""
