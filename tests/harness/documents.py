"""An incident bundle as the observation documents its reporters would send (attribution/intake/codec.py).

One document per node, made by the node collector's own code (attribution/node/logs.py select_lines with the
generated hooks/suspicious.patterns and error-lines.patterns, node/snapshots.py for the counters) from the node's
folder, with the Slurm values a node epilog would see for the bundle's context; and the controller's, made by the controller's own
collection (pipeline/controller.py document: the job output read with the pack's prefilter, the lines kept for
replay) with the bundle's context as the controller would have made it. Posting them all, in any order, must give
the verdict diagnose_bundle gives.
"""

from __future__ import annotations

from pathlib import Path

from attribution.node import logs as nodelogs
from attribution.node.agent import version
from attribution.node.document import node_document

ROOT = Path(__file__).resolve().parents[2]
FILTER = ROOT / "hooks" / "suspicious.patterns"


def _epoch(t) -> int | None:
    return int(t.timestamp()) if t is not None else None


def _sysfs_listing(folder: Path) -> str | None:
    """A snapshot folder in the bundle's tree layout (infiniband/<dev>/<port>/counters/<name>, pci/<bdf>/aer_*)
    as the compact listing the hooks write (sysfs.txt: `grep -H` lines)."""
    lines = []
    ib = folder / "infiniband"
    if ib.is_dir():
        for f in sorted(ib.glob("*/*/*/*")):
            dev, port, group, name = f.relative_to(ib).parts
            lines.append(f"/sys/class/infiniband/{dev}/ports/{port}/{group}/{name}:{f.read_text().strip()}")
    pci = folder / "pci"
    if pci.is_dir():
        for f in sorted(pci.glob("*/aer_dev_*")):
            for row in f.read_text().splitlines():
                if row.strip():
                    lines.append(f"/sys/bus/pci/devices/{f.parent.name}/{f.name}:{row.strip()}")
    return "".join(f"{x}\n" for x in lines) if lines else None


def _counters(node_dir: Path, shown: str) -> dict:
    from attribution.node.snapshots import read_snapshots

    tdir = node_dir / "telemetry"
    if not tdir.is_dir():
        return {}
    got = dict(read_snapshots(str(tdir)), folder=shown)
    for phase in ("prolog", "epilog"):
        if phase in got and "sysfs.txt" not in got[phase]:
            listing = _sysfs_listing(tdir / phase)
            if listing:
                got[phase]["sysfs.txt"] = listing
        topo = tdir / phase / "pci" / "topology"
        if phase in got and topo.is_file() and "pci-topology.txt" not in got[phase]:
            got[phase]["pci-topology.txt"] = topo.read_text()
    return got


def node_documents(bundle: Path) -> list[dict]:
    """What each node's epilog would send for the bundle's job (its folder's logs and snapshots)."""
    from attribution.scope.bundle import load_context

    ctx = load_context(bundle / "context.yaml")
    strings = nodelogs.read_filter(str(FILTER))
    errorlike = nodelogs.read_error_lines(str(FILTER.parent / "error-lines.patterns"))
    out = []
    for node in ctx.nodes:
        ndir = bundle / "nodes" / node
        if not ndir.is_dir():  # a node that left no folder never reported (it failed, or its epilog did not run)
            continue
        logs = []
        for source, name in (("kernel", "kernel.log"), ("fabricmanager", "fabricmanager.log")):
            path = ndir / name
            data, how = nodelogs.read_file(str(path), 0, 64 << 20)
            log = {"source": source, "origin": f"nodes/{node}/{name}", **how, "lines": 0, "bytes": 0,
                   "blocks": [], "cut": False}
            if data:
                log["blocks"], log["lines"], log["cut"] = nodelogs.select_lines(data, strings, errorlike=errorlike)
                log["bytes"] = len(data)
            logs.append(log)
        slurm = {"SLURM_JOB_ID": ctx.job_id, "SLURMD_NODENAME": node, "SLURM_NODELIST": ",".join(ctx.nodes),
                 "SLURM_CLUSTER_NAME": ctx.cluster, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}
        if ctx.exit_code:
            slurm["SLURM_JOB_EXIT_CODE2"] = ctx.exit_code
        for key, t in (("SLURM_JOB_START_TIME", ctx.start), ("SLURM_JOB_END_TIME", ctx.end)):
            if t is not None:
                slurm[key] = str(_epoch(t))
        boot = ctx.boot_time.get(node)
        out.append(node_document(node, ctx.cluster, slurm, float(_epoch(ctx.end) or 0) + 1, None,
                                 boot.timestamp() if boot else None, 86400, ctx.timezone, logs, _counters(ndir, f"nodes/{node}/telemetry"),
                                 f"attribution-node {version()}", None))
    return out


def controller_document(ruleset, bundle: Path) -> dict:
    """What the controller's epilog would send for the bundle's job: its job/ files collected, its context."""
    from attribution.collect.joboutput import read_job_output
    from attribution.pipeline.controller import document
    from attribution.replay.keep import LineKeeper, bundle_place
    from attribution.scope.bundle import load_context

    ctx = load_context(bundle / "context.yaml")
    keeper = LineKeeper(ruleset)
    obs, cov = [], []
    jdir = bundle / "job"
    for path in sorted(jdir.iterdir()) if jdir.is_dir() else []:
        if not path.is_file():
            continue
        shown = f"job/{path.name}"
        o, c = read_job_output(path, shown, ctx, ruleset.prefilter("job"),
                               tap=keeper.tap("job", None, bundle_place("job", None, path.name), shown))
        obs += o
        cov.append(c)
    return document(ctx, obs, cov, keeper.document(reporter="controller"), float(_epoch(ctx.end) or 0) + 2)


def documents(ruleset, bundle: Path) -> list[dict]:
    """Every document of the bundle's job: the nodes', then the controller's."""
    return node_documents(bundle) + [controller_document(ruleset, bundle)]


__all__ = ["documents", "node_documents", "controller_document", "FILTER"]
