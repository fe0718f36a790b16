"""Throughput of the Attribution Service: observation batches accepted per second with 1, 8 and 64 concurrent
clients.

Starts its own PostgreSQL (attribution.store.embedded.EmbeddedPostgres in a temporary directory, fsync on unless
--fast) and its own `attribution serve` (tests/harness/service.py), then, for each concurrency level, lets that
many clients post node batches as fast as the service accepts them for --seconds. Each client reports its own
jobs, one node batch after the other (the shape of many jobs ending across a cluster); a batch is the observation
document a node collector sends (attribution/node/document.py): the kept lines of its kernel log, --events Xid
lines, made before the clock starts; the service decodes it, extracts, correlates and stores. Every batch is new
to the store (its node names are unique), so each one inserts events and re-attributes its job.

    .venv/bin/python bench/service_throughput.py                 # 1, 8, 64 clients, 15 s each, 1 worker
    .venv/bin/python bench/service_throughput.py --workers 2 --clients 1,8,64,128 --seconds 30

Prints one line per level: batches accepted, accepted per second, events per second, refused (non-200)
answers, and latency percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

UTC = timezone.utc
#: More batches per second than any run here reaches: how many bodies to prepare.
MAX_RATE = 400


def node_document(job_id: str, node: str, nodes: str, lines: list[str], start: datetime, end: datetime) -> dict:
    """The observation document a node collector sends for one failed job (attribution/node/document.py): its
    kernel log's kept lines, no counter snapshots."""
    from attribution.node.document import node_document as document

    slurm = {"SLURM_JOB_ID": job_id, "SLURMD_NODENAME": node, "SLURM_JOB_NODELIST": nodes,
             "SLURM_CLUSTER_NAME": "bench", "SLURM_JOB_EXIT_CODE": "256", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
             "SLURM_JOB_START_TIME": str(int(start.timestamp())), "SLURM_JOB_END_TIME": str(int(end.timestamp()))}
    log = {"source": "kernel", "origin": "/var/log/kern.log", "status": "ok", "notes": [], "lines": len(lines),
           "bytes": sum(len(x) + 1 for x in lines), "cut": False, "blocks": [[1, lines]]}
    return document(node, "bench", slurm, end.timestamp(), start.timestamp(), start.timestamp() - 86400, 86400,
                    "UTC", [log], {}, "attribution-node bench", None)


def template_lines(ruleset, n_events: int) -> tuple[list[str], datetime, datetime]:
    """Real-format kernel lines (an Xid 63 each, stamped in the job's window) that the centre's rules make
    `n_events` events of (checked here through the service's own decoding)."""
    from attribution.intake.codec import decode
    from attribution.pipeline.intake import piece_of

    start = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
    end = start + timedelta(hours=2)
    lines = []
    for i in range(n_events):
        t = start + timedelta(minutes=1, seconds=i)
        lines.append(f"[{t.strftime('%a %b')} {t.day:2d} {t.strftime('%H:%M:%S %Y')}] NVRM: Xid (PCI:0000:1b:00): "
                     f"63, pid='<unknown>', name=<unknown>, Row Remapping: New row (0x{i:016x}) was marked for "
                     f"remapping, reset gpu to activate.")
    piece = piece_of(ruleset, decode(node_document("0", "n0", "n0", lines, start, end), "bench"))
    if len(piece.events) != n_events:
        raise SystemExit(f"the template lines gave {len(piece.events)} events, expected {n_events}")
    return lines, start, end


def batches(template, client: int, nodes_per_job: int):
    """Endless node documents for one client: job after job, node after node, each one new to the store."""
    lines, start, end = template
    job = 0
    while True:
        job += 1
        job_id = f"{client}-{job}"
        nodes = [f"c{client}j{job}n{i}" for i in range(nodes_per_job)]
        for node in nodes:
            yield json.dumps(node_document(job_id, node, ",".join(nodes), lines, start, end)).encode(), len(lines)


async def run_level(url: str, token: str, template, clients: int, seconds: float, nodes_per_job: int,
                    level: int) -> dict:
    import httpx

    latencies: list[float] = []
    refused: dict[int | str, int] = {}
    accepted = 0
    events = 0
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    # Bodies are made before the clock starts, so the clients spend their time waiting for the service.
    per_client = int(seconds * MAX_RATE / clients) + nodes_per_job
    bodies = []
    for no in range(clients):
        gen = batches(template, level * 1000 + no, nodes_per_job)
        bodies.append([next(gen) for _ in range(per_client)])
    stop_at = time.monotonic() + seconds

    async def client(no: int, http: httpx.AsyncClient) -> None:
        nonlocal accepted, events
        for body, n in bodies[no]:
            if time.monotonic() >= stop_at:
                return
            t0 = time.monotonic()
            try:
                r = await http.post("/v1/observations", content=body, headers=headers)
            except httpx.TransportError as exc:  # counted, not fatal: the run says how often it happened
                refused[type(exc).__name__] = refused.get(type(exc).__name__, 0) + 1
                continue
            dt = time.monotonic() - t0
            if r.status_code == 200:
                accepted += 1
                events += n
                latencies.append(dt)
            else:
                refused[r.status_code] = refused.get(r.status_code, 0) + 1

    t0 = time.monotonic()
    cpu0 = time.process_time()
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        await asyncio.gather(*(client(i, http) for i in range(clients)))
    elapsed = time.monotonic() - t0
    client_cpu = (time.process_time() - cpu0) / elapsed
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return {"clients": clients, "accepted": accepted, "seconds": elapsed, "per_second": accepted / elapsed,
            "events_per_second": events / elapsed, "refused": refused, "p50_ms": pct(0.50), "p95_ms": pct(0.95),
            "p99_ms": pct(0.99), "client_cpu": client_cpu, "mean_ms": statistics.fmean(latencies) * 1000 if latencies else float("nan")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,8,64", help="concurrency levels, comma-separated")
    ap.add_argument("--seconds", type=float, default=15.0, help="duration of each level")
    ap.add_argument("--workers", type=int, default=1, help="service worker processes")
    ap.add_argument("--pool", type=int, default=8, help="database connections per worker (service.db_pool_size)")
    ap.add_argument("--events", type=int, default=10, help="events per node batch")
    ap.add_argument("--nodes-per-job", type=int, default=8)
    ap.add_argument("--fast", action="store_true", help="PostgreSQL without fsync (not what production runs)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, database)")
    args = ap.parse_args()
    levels = [int(x) for x in args.clients.split(",") if x.strip()]

    from sqlalchemy import create_engine

    from attribution.store.embedded import EmbeddedPostgres
    from attribution.rulepack.load import load_rules
    from attribution.store import migrate
    from tests.harness.pg import free_port
    from tests.harness.service import start_service

    tmp = Path(tempfile.mkdtemp(prefix="attribution-bench-"))
    os.chmod(tmp, 0o755)  # the embedded PostgreSQL runs as postgres when we are root
    pg = EmbeddedPostgres(tmp / "pg", port=free_port(), fast=args.fast)
    service = None
    try:
        url = pg.ensure_running(timeout=60)  # initdb, start, CREATE DATABASE attribution
        engine = create_engine(url)
        migrate.upgrade(engine)
        engine.dispose()
        service = start_service(url, tmp / "service", workers=args.workers,
                                service={"db_pool_size": args.pool, "request_timeout_seconds": 120})
        template = template_lines(load_rules(ROOT / "rules"), args.events)
        print(f"attribution service on {service.url}: {args.workers} worker(s), {args.pool} db connection(s) "
              f"each; PostgreSQL {'without' if args.fast else 'with'} fsync; {os.cpu_count()} CPU(s); "
              f"{args.events} events per batch, {args.nodes_per_job} node batches per job; {args.seconds:g} s per "
              f"level")
        print(f"{'clients':>7} {'accepted':>9} {'batches/s':>10} {'events/s':>9} {'p50 ms':>7} {'p95 ms':>7} "
              f"{'p99 ms':>7} {'client CPU':>10}  refused")
        any_refused = False
        for i, c in enumerate(levels):
            r = asyncio.run(run_level(service.url, service.tokens["report"], template, c, args.seconds,
                                      args.nodes_per_job, i + 1))
            any_refused = any_refused or bool(r["refused"])
            print(f"{r['clients']:>7} {r['accepted']:>9} {r['per_second']:>10.1f} {r['events_per_second']:>9.0f} "
                  f"{r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f} {r['p99_ms']:>7.1f} {r['client_cpu']:>9.0%}  "
                  f"{r['refused'] or '-'}",
                  flush=True)
        if any_refused:  # the service logs why it refused (database errors, busy lanes)
            notes = [ln for ln in service.log.read_text(errors="replace").splitlines()
                     if not ln.startswith("INFO") and not ln.startswith("attribution serve:")]
            print("service log:\n  " + "\n  ".join(notes[-20:] or ["(nothing but INFO lines)"]))
        return 0
    finally:
        if service is not None:
            service.stop()
        try:
            pg.stop()
        except Exception as exc:  # noqa: BLE001 - report and go on removing the directory
            print(f"stopping PostgreSQL: {exc}", file=sys.stderr)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
