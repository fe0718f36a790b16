"""scope: who, where and when. A scheduler's identifier (an incident bundle, the Slurm epilog environment, sacct,
a Kueue workload) becomes an immutable ExecutionContext. The adapters are pure; `schedulers` is the I/O half."""
