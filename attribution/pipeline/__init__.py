"""The use cases, one module each: the only place that wires the stages (scope -> collect -> extract -> correlate
-> store). The command line, the service and the hooks are thin entry points over them.

| module | use case |
|---|---|
| `diagnose` | one job's evidence to its verdict (the one algorithm: streamed, symptoms folded) |
| `ingest` | a job's piece of evidence into the store, and its verdict from everything stored |
| `intake` | an observation document (a node's, the controller's) decoded and run through the one pipeline |
| `controller` | the controller epilog's collection: the job's output and final state, as a document |
| `live` | a job from its scheduler and the configured connectors (`diagnose --slurm-job`, `backfill`) |
| `drain` | the drain plan, its application through Slurm, resumes |
| `rederive` | a stored job's verdict re-derived with another rule pack, from its kept evidence |
| `history` | the stored history replayed (`rules diff`), reattributed, and the lines no rule matches |
| `rulecheck` | `rules check`: a pack's schema and semantics, every rule's examples through collect and extract |
"""
