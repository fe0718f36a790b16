"""node: the node collector the Slurm hooks of a compute node run. It reads this node's window of the job's logs,
keeps the lines the generated filter selects, takes the counter snapshots as the tools wrote them, and sends one
observation document to the service through its spool.

Standard library only: nothing here imports a third-party module or a part of attribution outside this package
(tests/test_architecture.py checks it in a fresh interpreter), so the package runs on Python 3.9+ as it is,
copied beside the hooks or installed as the dependency-free `attribution` distribution (docs/install.md).
"""
