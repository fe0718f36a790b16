"""History as a laboratory (docs/replay.md): the evidence kept for replay (`keep`; `streams`: what the live
connectors read; `bounds`: the per-job bounds), what a re-derived verdict changes (`diff`), and the templates of
what no rule matches (`mine`, `suggest`). Re-deriving a stored job and applying it to the stored history are use
cases: `pipeline.rederive` and `pipeline.history`."""
