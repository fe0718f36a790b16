"""Target 5b: the node epilogs of one failed job on every node, started together, reporting to one service.

Each node is a faked one (bench/nodeside.py: its own hook.env, state, spool, hook log and kernel log; the counters of
one faked 8-GPU/8-HCA node, which they all read) and runs the installed `hooks/epilog` as slurmd runs it, a fresh
bash and a fresh node collector each, after its prolog (the start stamp and the first counter snapshot). All of
them run in one cgroup (bench/cpu.py), so the nodes' CPU is counted whole; the service's process tree and the
database server's are each moved into a cgroup of their own. The run ends when every epilog has ended and the job's
verdict is final (its stored evidence attributed: `attribution.jobs.evidence_seq = attributed_seq`). The service's
resident memory (its process tree's VmRSS, summed) is sampled every 0.2 s.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.cpu import CpuMeter
from bench.nodeside import BenchNode, SafeRoot, fake_node, install_node, job_window, rss_of, tree_pids, \
    write_job_kernel_log, write_private
from bench.report import Result

JOB = "4242"
CLUSTER = "storm"


def _job_state(engine, n: int) -> dict:
    from sqlalchemy import text

    with engine.connect() as c:
        row = c.execute(text("SELECT id, evidence_seq, attributed_seq FROM attribution.jobs WHERE cluster = :c "
                             "AND job_id = :j"), {"c": CLUSTER, "j": JOB}).first()
        if row is None:
            return {"coverage": 0, "final": False}
        cov = c.execute(text("SELECT count(DISTINCT node_key) FROM attribution.coverage WHERE job_ref = :r"),
                        {"r": row[0]}).scalar()
        verdict = c.execute(text("SELECT outcome, root_node FROM attribution.job_verdicts WHERE cluster = :c AND "
                                 "job_id = :j"), {"c": CLUSTER, "j": JOB}).first()
        rows = c.execute(text("SELECT count(*) FROM attribution.verdicts WHERE job_ref = :r"), {"r": row[0]}).scalar()
        events = c.execute(text("SELECT count(*) FROM attribution.job_events WHERE job_ref = :r"),
                           {"r": row[0]}).scalar()
    return {"coverage": cov, "final": row[1] == row[2] and verdict is not None and cov == n, "verdict": verdict,
            "verdict_rows": rows, "events": events}


def bench_storm_service(work: Path, quick: bool) -> Result:
    from bench.node import _service

    n = int(os.environ.get("BENCH_STORM_NODES", 32 if quick else 512))
    workers, pool = 2, 8
    meter = CpuMeter()
    install = install_node(work)
    last = f"n{n - 1:04d}"
    pg, engine, svc, token = _service(work, "storm", CLUSTER, f"n[0000-{n - 1:04d}]", workers=workers,
                                      db_pool_size=pool, request_timeout_seconds=110, client_timeout_seconds=110)
    root = SafeRoot()
    service_cg, db_cg, group = meter.group(), meter.group(), None
    try:
        token_file = write_private(root.path / "report.token", token + "\n")
        fake, fake_env = fake_node(root.path / "fake")
        # 512 nodes share 2 cores here: each hook is given 300 s instead of the production 20 (its `timeout` would
        # kill it first), the service's answer 110 s; a real node runs its own alone
        nodes = [BenchNode(root, install, fake_env, svc.url, token_file, name=f"n{i:04d}",
                           cluster=CLUSTER, budget=300, timeout=110) for i in range(n)]
        nodelist = f"n[0000-{last[1:]}]"
        start, end = job_window()
        # the warm-up: one epilog of another job through the service (its first report builds its caches)
        nodes[0].prolog("1", start, nodelist="n0000")
        write_job_kernel_log(nodes[0].kernel, start, end, xid79_at=None)
        subprocess.run(nodes[0].hook("epilog"), env=nodes[0].env("1", "256", start, nodelist="n0000"), timeout=300)
        if "; stored" not in nodes[0].last_line():
            raise RuntimeError(f"the warm-up epilog did not store: {nodes[0].last_line()}")
        t_prolog = time.perf_counter()
        for i, node in enumerate(nodes):
            node.prolog(JOB, start, nodelist=nodelist)
            write_job_kernel_log(node.kernel, start, end, xid79_at=1_000 if i == 7 else None, seed=i)
        t_prolog = time.perf_counter() - t_prolog
        service_cg.adopt(tree_pids(svc.process.pid))
        db_cg.adopt(tree_pids(pg.pid()))
        rss0 = rss_of(service_cg.pids())[0]
        svc0, db0 = service_cg.cpu(), db_cg.cpu()
        group = meter.group()
        peak_rss = rss0
        procs = []
        t0 = time.perf_counter()
        for node in nodes:
            procs.append(subprocess.Popen(node.hook("epilog"), env=node.env(JOB, "256", start, nodelist=nodelist),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, preexec_fn=group.enter_fn()))
        ended = None
        state: dict = {}
        while True:
            peak_rss = max(peak_rss, rss_of(service_cg.pids())[0])
            if ended is None and all(p.poll() is not None for p in procs) and group.empty():
                ended = time.perf_counter() - t0
            if ended is not None:
                state = _job_state(engine, n)
                if state["final"] or time.perf_counter() - t0 > ended + 120:
                    break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        node_cpu = group.cpu()
        svc_cpu, db_cpu = service_cg.cpu() - svc0, db_cg.cpu() - db0
        hwm = rss_of(service_cg.pids())[1]
        lines = [node.last_line() for node in nodes]
        spooled = sum(node.spooled() for node in nodes)
    finally:
        svc.stop()
        engine.dispose()
        pg.stop()
        for g in (group, service_cg, db_cg):
            if g is not None:
                g.close()
        root.close()
    stored = sum(f"node job {JOB};" in ln and "; stored" in ln for ln in lines)
    bad = [ln for ln in lines if "; stored" not in ln][:3]
    verdict = state.get("verdict")
    per_report = svc_cpu / n * 1000
    cores = os.cpu_count() or 1
    ok = (stored == n and spooled == 0 and state.get("final") and verdict is not None and verdict[1] == "n0007"
          and per_report <= 20)
    return Result(
        f"5b. {n} node epilogs of one failed job started together, each the installed hooks/epilog and a fresh "
        f"node collector, reporting to one service ({workers} workers, PostgreSQL)",
        f"{wall:.1f} s until all stored and the verdict final ({stored} stored, {spooled} spooled; verdict "
        f"{verdict[0] + ' on ' + verdict[1] if verdict else 'none'}); the service {per_report:.1f} ms CPU per report "
        f"(the database server {db_cpu / n * 1000:.1f} ms more), peak RSS {peak_rss / 2**20:.0f} MiB",
        f"the nodes' own CPU: {node_cpu:.1f} s ({node_cpu / n * 1000:.0f} ms each), {node_cpu / cores:.1f} s of "
        f"this machine's {cores} cores",
        f"{n / wall:.1f} epilogs/s; the service {per_report:.1f} ms per report",
        "all stored once, none spooled, the verdict final; the service <= 20 ms CPU per report, its memory "
        "bounded", ok,
        [f"the service's process tree (uvicorn's {workers} workers and their parent) and the database server's each "
         f"in a cgroup of its own ({meter.describe()}); the nodes' {n} hooks in another: {node_cpu:.1f} CPU seconds "
         f"in all; the service {svc_cpu:.1f} s, the database server {db_cpu:.1f} s over the same time",
         f"the service's resident memory (VmRSS of its process tree, sampled every 0.2 s): {rss0 / 2**20:.0f} MiB "
         f"before, {peak_rss / 2**20:.0f} MiB at the peak; the sum of its processes' own peaks (VmHWM) "
         f"{hwm / 2**20:.0f} MiB",
         f"every epilog ended after {ended:.1f} s; the verdict was final {wall - ended:.1f} s later (the service "
         f"attributes a job at most once per settle interval and once more at its end)",
         f"the job: coverage of {state.get('coverage')} nodes, {state.get('events')} linked event(s), "
         f"{state.get('verdict_rows')} verdict row(s) in its history (a row only when the verdict changes)",
         f"before the storm, not timed: one epilog of another job (the service's first report) and the {n} prologs "
         f"({t_prolog:.0f} s with writing the {n} kernel logs of 2,000 lines, an Xid 79 on n0007's)",
         f"on {n} real nodes the hooks run in parallel, one per node; here {n} share {cores} cores, so their own "
         f"CPU alone is {node_cpu / cores:.0f} s of the wall time",
         *[f"not stored: {b}" for b in bad]])


__all__ = ["bench_storm_service"]
