"""An incident bundle's logs as a log shipper would have put them into Loki (for tests/harness/loki.FakeLoki).

Each node log becomes one stream `{host="<node>", source="kernel"|"fabricmanager", filename=...}` and each job
output file one stream `{job_id="<id>", source="job", filename=...}`, with the lines unchanged. The entry time is
what promtail would have stored: the line's own time where it has one (its kernel or NCCL/glog stamp), otherwise the
time of the next line that has one (a shipper never stamps a line before it was written), else the job end; and
entries of one stream are at least 1 µs apart, in file order, as a shipper reading line by line stamps them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from attribution.collect.joblog import JobLineParser, looks_labelled
from attribution.collect.kernel import KernelLineParser
from attribution.scope.bundle import load_context
from attribution.timeparse import YearGuesser

__all__ = ["bundle_streams", "dcgm_history", "H100_BUSES"]

UTC = timezone.utc


def _ns(t: datetime) -> int:
    t = t.astimezone(UTC)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def _stamp(lines: list[str], own: list[datetime | None], fallback: datetime) -> list[int]:
    """Entry times in file order, at least 1 µs apart (a shipper reads lines one after another)."""
    out = [0] * len(lines)
    nxt = fallback
    for i in range(len(lines) - 1, -1, -1):
        if own[i] is not None:
            nxt = own[i]
        out[i] = _ns(own[i] or nxt)
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1] + 1000)
    return out


def bundle_streams(bundle: Path, node_label: str = "host", source_label: str = "source",
                   job_label: str = "job_id") -> list[tuple[dict, list[tuple[int, str]]]]:
    ctx = load_context(bundle / "context.yaml")
    years = YearGuesser(ctx.start, ctx.end, UTC)
    end = ctx.end or datetime.now(UTC)
    streams = []
    for node in ctx.nodes:
        for source in ("kernel", "fabricmanager"):
            path = bundle / "nodes" / node / f"{source}.log"
            if not path.is_file():
                continue
            lines = path.read_text(errors="replace").splitlines()
            parser = KernelLineParser(zone=UTC, boot_time=ctx.boot_time.get(node), years=years)
            own = [parser.parse(ln).time for ln in lines]
            labels = {node_label: node, source_label: source, "filename": f"/var/log/{source}.log"}
            streams.append((labels, list(zip(_stamp(lines, own, end), lines))))
    for path in sorted((bundle / "job").glob("*")):
        lines = path.read_text(errors="replace").splitlines()
        parser = JobLineParser(zone=UTC, years=years, labelled=looks_labelled(lines[:400]))
        own = [parser.parse(ln).time for ln in lines]
        labels = {job_label: ctx.job_id, source_label: "job", "filename": f"/home/jobs/{path.name}"}
        streams.append((labels, list(zip(_stamp(lines, own, end), lines))))
    return streams


#: The GPUs of the incident 01 nodes (DGX H100: PCI bus ids from their kernel logs), by index.
H100_BUSES = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")


def dcgm_history(nodes: tuple[str, ...], start: datetime, end: datetime, step: int = 30,
                 xid_at: dict | None = None, stuck: dict | None = None, dbe_at: dict | None = None,
                 node_label: str = "Hostname") -> list[tuple[str, dict, list[tuple[float, float]]]]:
    """dcgm-exporter series for every GPU of `nodes` from `start` to `end`, one sample per `step` seconds.

    xid_at {(node, gpu): (time, xid)}: DCGM_FI_DEV_XID_ERRORS takes that value at that time and keeps it;
    stuck {(node, gpu): xid}: the gauge shows that value all along (an Xid from before the window);
    dbe_at {(node, gpu): (time, count)}: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counts up to `count` at that time."""
    xid_at, stuck, dbe_at = xid_at or {}, stuck or {}, dbe_at or {}
    times = []
    t = start.timestamp()
    while t <= end.timestamp():
        times.append(t)
        t += step
    out = []
    for node in nodes:
        for g, bus in enumerate(H100_BUSES):
            labels = {node_label: node, "gpu": str(g), "pci_bus_id": f"00000000:{bus}:00.0",
                      "UUID": f"GPU-{node}-{g:02d}",
                      "device": f"nvidia{g}", "modelName": "NVIDIA H100 80GB HBM3", "job": "dcgm-exporter"}
            xid = []
            for t in times:
                v = stuck.get((node, g), 0)
                if (node, g) in xid_at and t >= xid_at[(node, g)][0].timestamp():
                    v = xid_at[(node, g)][1]
                xid.append((t, float(v)))
            out.append(("DCGM_FI_DEV_XID_ERRORS", labels, xid))
            dbe = []
            for t in times:
                v = 0
                if (node, g) in dbe_at and t >= dbe_at[(node, g)][0].timestamp():
                    v = dbe_at[(node, g)][1]
                dbe.append((t, float(v)))
            out.append(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", labels, dbe))
    return out
