"""node: the thin node agent the Slurm hooks run: read this node's window, find what matters, hand a report over
(to the database, the service or the spool)."""
