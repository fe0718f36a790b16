"""correlate: root cause versus symptoms across all nodes of a job, by the causal graph. Pure."""
