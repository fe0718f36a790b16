"""The bundle collector: every log of an incident bundle (docs/bundle.md) to observations and coverage."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Mapping

from attribution.safefile import shown_name
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.nodelogs import NodeLogSpec, stream_node_log
from attribution.collect.scan import Prefilter

KERNEL_LOG = "kernel.log"
FABRICMANAGER_LOG = "fabricmanager.log"
#: Node-local files read as source "node" besides the two above (docs/bundle.md).
OTHER_LOG_SUFFIXES = (".log", ".txt")


def collect_bundle(bundle: Path, ctx: ExecutionContext,
                   prefilter_for: Callable[[str], Prefilter]) -> tuple[list[Observation], list[Coverage]]:
    """All observations of a bundle, with one coverage record per source and node (or job file)."""
    coverage: list[Coverage] = []
    observations = list(stream_bundle(bundle, ctx, prefilter_for, coverage))
    return observations, coverage


def stream_bundle(bundle: Path, ctx: ExecutionContext, prefilter_for: Callable[[str], Prefilter],
                  coverage: list[Coverage]) -> Iterator[Observation]:
    """collect_bundle one observation at a time, each file's coverage record added to `coverage` as it ends."""
    nodes_dir = bundle / "nodes"
    for node in ctx.nodes:
        ndir = nodes_dir / node
        if not ndir.is_dir():
            reason = f"no nodes/{node} folder"
            coverage.append(Coverage("kernel", node, "missing", reason=reason))
            coverage.append(Coverage("fabricmanager", node, "missing", reason=reason))
            continue
        for source, name in (("kernel", KERNEL_LOG), ("fabricmanager", FABRICMANAGER_LOG)):
            spec = NodeLogSpec(source, node, f"nodes/{node}/{name}")
            yield from stream_node_log(ndir / name, spec, ctx, prefilter_for(source), coverage.append)
        for extra in _other_logs(ndir):
            spec = NodeLogSpec("node", node, f"nodes/{node}/{shown_name(extra.name)}")
            yield from stream_node_log(extra, spec, ctx, prefilter_for("node"), coverage.append)
    from attribution.collect.joboutput import stream_job_output  # not on a node (bundle_place needs the names)

    job_dir = bundle / "job"
    files = sorted(p for p in job_dir.iterdir() if p.is_file()) if job_dir.is_dir() else []
    if not files:
        coverage.append(Coverage("job", None, "missing", reason="no job output files"))
    for path in files:
        yield from stream_job_output(path, f"job/{shown_name(path.name)}", ctx, prefilter_for("job"), coverage.append)


def _other_logs(ndir: Path) -> list[Path]:
    out = []
    for p in sorted(ndir.iterdir()):
        if p.name in (KERNEL_LOG, FABRICMANAGER_LOG) or not p.is_file():
            continue
        if p.suffix in OTHER_LOG_SUFFIXES:
            out.append(p)
    return out


def prefilters(mapping: Mapping[str, Prefilter]) -> Callable[[str], Prefilter]:
    return lambda source: mapping[source]
