"""Configured local files: a path or glob per node (`/logs/$node/kern.log*`), read like a bundle's node logs, or
job output files (`/jobs/$job_id/*.out`) read like a bundle's job/ folder. Rotated `.gz` files are read too.

`$node`, `$job_id` and `$cluster` in a path are replaced by the job's values. A node log path without `$node`
belongs to the node whose name starts its file name (as in a bundle's job/ folder); others are reported, not read.
"""

from __future__ import annotations

import glob
import gzip
from pathlib import Path
from string import Template
from typing import Callable, Sequence

from attribution.config import FileSourceSettings
from attribution.model import Coverage, ExecutionContext, Observation
from attribution.collect.joboutput import node_of_file, parse_job_output
from attribution.collect.nodelogs import NodeLogSpec, parse_node_log
from attribution.collect.scan import Prefilter
from attribution.collect.textio import Tapped, open_regular


def expand(pattern: str, ctx: ExecutionContext, node: str | None) -> str:
    return Template(pattern).safe_substitute(node=node or "", job_id=ctx.job_id, cluster=ctx.cluster)


def _open(path: Path):
    fp = open_regular(path)
    if path.suffix != ".gz":
        return fp
    g = gzip.GzipFile(fileobj=fp, mode="rb")
    g.myfileobj = fp  # closed with it, as when gzip opens the file itself
    return g


def read_one(path: Path, source: str, node: str | None, ctx: ExecutionContext,
             prefilter: Prefilter, keeper=None) -> tuple[list[Observation], Coverage]:
    """One file; `keeper` (replay.keep.LineKeeper) sees what is read as it is parsed."""
    location = str(path)
    try:
        with _open(path) as opened:
            fp = opened if keeper is None else Tapped(opened, keeper.stream_tap("text", source, node, location))
            if source == "job":
                obs, stats = parse_job_output(fp, location, ctx, prefilter, file_node=node)
            else:
                obs, stats = parse_node_log(fp, NodeLogSpec(source, node or "", location), ctx, prefilter)
    except FileNotFoundError:
        return [], Coverage(source, node, "missing", reason="no file", file=location)
    except (OSError, EOFError) as exc:  # gzip raises BadGzipFile (an OSError) or EOFError for a cut file
        return [], Coverage(source, node, "error", reason=f"cannot read: {getattr(exc, 'strerror', None) or exc}",
                            file=location)
    return obs, Coverage(source, node, "ok" if stats.bytes else "empty", lines=stats.lines, file=location,
                         notes=tuple(stats.summary()))


def collect_files(entries: Sequence[FileSourceSettings], ctx: ExecutionContext,
                  prefilter_for: Callable[[str], Prefilter], keeper=None) -> tuple[list[Observation], list[Coverage]]:
    obs: list[Observation] = []
    cov: list[Coverage] = []
    for entry in entries:
        per_node = "$node" in entry.path or "${node}" in entry.path
        targets = [(n, expand(entry.path, ctx, n)) for n in ctx.nodes] if per_node else [(None, expand(entry.path,
                                                                                                     ctx, None))]
        for node, pattern in targets:
            paths = sorted(Path(p) for p in glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) \
                else [Path(pattern)]
            paths = [p for p in paths if not p.is_dir()]
            if not paths:
                cov.append(Coverage(entry.source, node, "missing", reason=f"no file matches {pattern}", file=pattern))
                continue
            for path in paths:
                owner = node if per_node else node_of_file(path.name, ctx.nodes)
                if owner is None and entry.source != "job":
                    cov.append(Coverage(entry.source, None, "error", file=str(path),
                                        reason="cannot tell which node this file belongs to (use $node in the path)"))
                    continue
                o, c = read_one(path, entry.source, owner, ctx, prefilter_for(entry.source), keeper)
                obs.extend(o)
                cov.append(c)
    return obs, cov


__all__ = ["expand", "read_one", "collect_files"]
