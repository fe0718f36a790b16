"""Benchmarks against the physical baselines, side by side in one run; writes docs/performance.md.

    python -m bench.run            # everything, full sizes (1 GB job logs, 10M stored events, 512 epilogs)
    python -m bench.run --quick    # the same at small sizes, for a smoke test
    python -m bench.run --only epilog hook storm-service

Absolute times on a shared machine are noise; the ratios to a baseline measured in the same run are the result.
Every benchmark generates its own data and starts its own PostgreSQL (attribution.store.embedded) in a temp dir.
The modules: extract (target 1), node (the node's hook from the installed wheel: targets 2 and 7), store (targets 3,
4a and 4b), storm (target 5b: the node epilogs of one job at once, to the service).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.report import ROOT, Result, loadavg, write_report


def median_of(n: int, fn) -> float:
    return statistics.median(fn() for _ in range(n))


# -- 6. correlation of a storm ------------------------------------------------------------------------------------


def bench_correlate(work: Path, quick: bool) -> Result:
    from datetime import datetime, timedelta, timezone

    from attribution.correlate.rootcause import correlate
    from attribution.model import Event, ExecutionContext
    from attribution.rulepack.load import load_rules

    rs = load_rules(ROOT / "rules")
    t0 = datetime(2026, 3, 10, 9, tzinfo=timezone.utc)
    nodes = tuple(f"g{i:03d}" for i in range(64))
    ctx = ExecutionContext(cluster="b", job_id="1", nodes=nodes, tasks_per_node=8, state="FAILED",
                           start=t0 - timedelta(hours=1), end=t0 + timedelta(hours=1))

    def ev(kind, node, s, gpu=None, code=None):
        k = rs.kinds[kind]
        return Event(kind=kind, role=k.role, rule=f"bench.{kind}", source="kernel", location=f"{node}:{s}",
                     line=kind, message=kind, node=node, gpu=gpu, code=code, time=t0 + timedelta(seconds=s),
                     outcome=k.outcome, action=k.action, severity=k.severity)

    def storm(n):
        evs = [ev("gpu_fallen_off_bus", "g007", 0, "0000:3a:00", 79)]
        for i in range(n):
            node = nodes[i % len(nodes)]
            evs.append(ev("gpu_app_exception", node, 1 + i / 50, "0000:3a:00", 13))
            evs.append(ev("nccl_error", node, 2 + i / 50))
            evs.append(ev("nccl_watchdog_timeout", node, 600 + i / 50))
        return evs

    sizes = (1_000, 4_000) if quick else (2_000, 16_000)
    took = {}
    for n in sizes:
        evs = storm(n)
        took[n] = median_of(3, lambda: _seconds(lambda: correlate(rs, ctx, evs)))
    small, big = sizes
    per_event = {n: took[n] / (3 * n) * 1e6 for n in sizes}
    growth = per_event[big] / per_event[small]
    return Result(f"6. correlate: a storm of Xid 13, NCCL errors and watchdog timeouts on {len(nodes)} nodes "
                  f"after one Xid 79 ({3 * small:,} and {3 * big:,} events)",
                  f"{took[small] * 1000:.0f} ms and {took[big]:.2f} s ({per_event[small]:.0f} and "
                  f"{per_event[big]:.0f} us per event)", f"the same per-event cost at {3 * small:,} events",
                  f"{growth:.2f}x per event at {big // small}x the events", "near-linear: <= 2x per event",
                  growth <= 2.0)


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    from bench.extract import bench_extract
    from bench.node import bench_epilog_cpu, bench_hook
    from bench.store import bench_fleet, bench_fleet_year, bench_store
    from bench.storm import bench_storm_service

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test of the benchmarks)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="extract epilog store fleet fleet-year hook storm-service correlate")
    ap.add_argument("--repeat", type=int, default=5, help="runs in a row of the store benchmark (target 3)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the page the rows are merged into (default: docs/performance.md; with --quick: none, "
                         "the rows are printed only)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    benches = {"extract": bench_extract, "epilog": bench_epilog_cpu, "store": bench_store, "fleet": bench_fleet,
               "fleet-year": bench_fleet_year,
               "hook": bench_hook, "storm-service": bench_storm_service,
               "correlate": bench_correlate}
    chosen = args.only or list(benches)
    results = []
    loads = []
    with tempfile.TemporaryDirectory(prefix="attribution-bench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        for name in chosen:
            print(f"== {name}", flush=True)
            t0 = time.perf_counter()
            before = loadavg()
            got = (bench_store(work, args.quick, repeat=args.repeat) if name == "store"
                   else benches[name](work, args.quick))
            loads.append(f"{name}: {before} before, {loadavg()} after")
            for r in got if isinstance(got, list) else [got]:
                print(f"   {r.name}: {r.ours} | {r.baseline} | {r.ratio} | target {r.target} | met {r.met}",
                      flush=True)
                results.append(r)
            print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    out = args.out if args.out is not None or args.quick else ROOT / "docs" / "performance.md"
    print(write_report(results, args.quick, out, loads))
    return 0 if all(r.met is not False for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
