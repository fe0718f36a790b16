"""Target 5: the node epilogs of one failed job on every node, started together, each a fresh process.

Each epilog is `attribution epilog` exec'd as slurmd would (a new interpreter that imports what it needs, reads its
own kernel log, extracts and stores through its own connection or HTTP client). The node agents share one home
whose caches (the compiled rule pack, the node settings) a first epilog filled, as every node's are after its
first failed job. All of them run in one cgroup (bench/cpu.py), so their CPU is counted whole; connections are
counted from pg_stat_activity every 0.2 s; the memory in use on the machine is sampled as they run.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.cpu import CpuMeter, tree_cpu
from bench.report import BIN, Result, node_bin


def _logs(storm: Path, n: int) -> list[Path]:
    from bench.gen import write_kernel_log

    logs = []
    for i in range(n):
        p = storm / f"kernel-{i}.log"
        write_kernel_log(p, 2_000, 0, seed=i, xid79_at=1_000 if i == 7 else None)
        logs.append(p)
    return logs


def _mem_used() -> int:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        info[k] = int(v.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) * 1024


def _env(base_env: dict, home: Path, i: int, n: int) -> dict:
    return dict(base_env, ATTRIBUTION_HOME=str(home), SLURM_JOB_ID="4242", SLURMD_NODENAME=f"n{i:04d}",
                SLURM_NODELIST=f"n[0000-{n - 1:04d}]", SLURM_JOB_EXIT_CODE="256", SLURM_SCRIPT_CONTEXT="epilog_slurmd",
                SLURM_CLUSTER_NAME="storm", SLURM_JOB_START_TIME="1773129600")


def _node_environ() -> dict:
    """This process's environment as slurmd would give it: none of ours, none of Slurm's, and none of Python's
    (a PYTHONDONTWRITEBYTECODE or PYTHONPATH of the shell that started the benchmark is not a node's)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("ATTRIBUTION_", "SLURM", "PYTHON"))}


def _argv(log: Path, agent: Path = BIN) -> list[str]:
    return [str(agent), "epilog", "--budget", "120", "--kernel-file", str(log)]


def run_storm(storm: Path, n: int, logs: list[Path], engine, base_env: dict, meter: CpuMeter,
              servers: dict[str, int | None] | None = None, agent: Path = BIN) -> dict:
    """Start the n epilogs at once; wall time until the last ends, peak connections, outputs, CPU (theirs, and
    that of each server process tree in `servers`, name -> pid, over the same time)."""
    from sqlalchemy import text

    home = storm / "home"
    warm = storm / "warm.log"
    warm.write_text("")
    with open(storm / "out-warm.txt", "w") as out:  # fills the caches (another job, not counted)
        subprocess.run(_argv(warm, agent), env=dict(_env(base_env, home, 0, n), SLURM_JOB_ID="1"), stdout=out,
                       stderr=subprocess.STDOUT, check=True, timeout=120)
    group = meter.group()
    servers = servers or {}
    server0 = {name: tree_cpu(pid) for name, pid in servers.items()}
    procs = []
    peak = 0
    mem0 = _mem_used()
    mem_peak = mem0
    t0 = time.perf_counter()
    try:
        for i in range(n):
            out = open(storm / f"out-{i}.txt", "w")
            procs.append(subprocess.Popen(_argv(logs[i], agent), env=_env(base_env, home, i, n), stdout=out,
                                          stderr=subprocess.STDOUT, preexec_fn=group.enter_fn()))
            out.close()
        left = set(range(n))
        ru_cpu = 0.0
        while left or not group.empty():
            with engine.connect() as c:
                peak = max(peak, c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                                "current_database()")).scalar())
            mem_peak = max(mem_peak, _mem_used())
            for i in list(left):
                done, _, usage = os.wait4(procs[i].pid, os.WNOHANG)
                if done:
                    procs[i].returncode = 0
                    left.discard(i)
                    ru_cpu += usage.ru_utime + usage.ru_stime
            time.sleep(0.2)
        total = time.perf_counter() - t0
        cpu = group.cpu()
        server_cpu = {name: tree_cpu(pid) - server0[name] for name, pid in servers.items()}
    finally:
        group.close()
    return {"wall": total, "peak": peak, "outputs": [(storm / f"out-{i}.txt").read_text() for i in range(n)],
            "cpu": cpu if cpu is not None else ru_cpu, "mem": mem_peak - mem0, "servers": server_cpu}


def _result(name: str, n: int, run: dict, engine, baseline: str, bound: int, notes: list[str],
            meter: CpuMeter, done: str = "; stored;") -> Result:
    from sqlalchemy import text

    with engine.connect() as c:
        cov = c.execute(text("SELECT count(DISTINCT node_key) FROM attribution.coverage c JOIN attribution.jobs j "
                             "ON j.id = c.job_ref WHERE j.job_id = '4242'")).scalar()
        verdict = c.execute(text("SELECT outcome, root_node FROM attribution.job_verdicts "
                                 "WHERE job_id = '4242'")).first()
        verdicts = c.execute(text("SELECT count(*) FROM attribution.verdicts v JOIN attribution.jobs j "
                                  "ON j.id = v.job_ref WHERE j.job_id = '4242'")).scalar()
    outputs = run["outputs"]
    stored = sum(done in o for o in outputs)
    spooled = sum("spooled" in o for o in outputs)
    wall = run["wall"]
    ok = (cov == n and stored == n and run["peak"] <= bound and verdict is not None and verdict[1] == "n0007"
          and wall <= 20)
    cpu = run["cpu"]
    bad = [o.strip().splitlines()[-1] for o in outputs if done not in o][:3]
    return Result(name, f"{run['wall']:.1f} s for all; {stored} stored directly, {spooled} spooled; peak "
                        f"{run['peak']} connections", baseline, f"{n / wall:.1f} epilogs/s",
                  "all stored, connections bounded, <= 20 s", ok,
                  [f"coverage rows for {cov} nodes; verdict {verdict[0]} on {verdict[1]}" if verdict else "no verdict",
                   f"{verdicts} verdict row(s) in the job's history (one each time the verdict changed)",
                   f"the {n} epilog processes used {cpu:.1f} CPU seconds ({cpu / n * 1000:.0f} ms each), counted with "
                   f"{meter.describe()}; on this machine's {os.cpu_count()} cores that alone is "
                   f"{cpu / (os.cpu_count() or 1):.1f} s of the wall time, where {n} real nodes run theirs in parallel",
                   f"memory in use on the machine grew by at most {run['mem'] / 2**30:.1f} GiB while they ran",
                   *[f"the {name} used {sec:.1f} CPU seconds meanwhile ({sec / n * 1000:.0f} ms per epilog; /proc "
                     f"times of its process tree, reaped children included)" for name, sec in run["servers"].items()],
                   *notes, *([f"not stored: {b}" for b in bad])])


def _setup(work: Path, name: str, quick: bool):
    from bench.store import database

    n = int(os.environ.get("BENCH_STORM_NODES", 32 if quick else 512))
    storm = work / name
    storm.mkdir()
    pg, engine, url = database(storm, "storm")
    return n, storm, pg, engine, url, _logs(storm, n)


def bench_storm(work: Path, quick: bool) -> Result:
    meter = CpuMeter()
    n, storm, pg, engine, url, logs = _setup(work, "storm", quick)
    try:
        from sqlalchemy import text

        with engine.connect() as c:
            max_conn = int(c.execute(text("SHOW max_connections")).scalar())
        env = _node_environ()
        run = run_storm(storm, n, logs, engine, dict(env, ATTRIBUTION_DATABASE_URL=url), meter,
                        {"database server": pg.pid()}, agent=node_bin(work))
        return _result(f"5. {n} node epilogs of one failed job started together against one database, each a "
                       f"fresh process", n, run, engine, f"max_connections {max_conn} (embedded default)", max_conn,
                       [], meter)
    finally:
        engine.dispose()
        pg.stop()


def bench_storm_service(work: Path, quick: bool) -> Result:
    """The same storm, the hooks reporting to `attribution serve` (2 workers, 8 connections each) instead."""
    from tests.harness.service import start_service

    meter = CpuMeter()
    n, storm, pg, engine, url, logs = _setup(work, "storm-service", quick)
    workers, pool = 2, 8
    svc = start_service(url, storm / "service", service={"db_pool_size": pool, "request_timeout_seconds": 110,
                                                          "client_timeout_seconds": 110}, workers=workers)
    try:
        token = storm / "report.token"
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(svc.tokens["report"] + "\n")
        cfg = storm / "hooks.yaml"
        cfg.write_text(f"service_url: {svc.url}\nservice_token_file: {token}\n"
                       f"service:\n  client_timeout_seconds: 110\n")
        env = _node_environ()
        run = run_storm(storm, n, logs, engine, dict(env, ATTRIBUTION_CONFIG=str(cfg)), meter,
                        {"service": svc.process.pid, "database server": pg.pid()}, agent=node_bin(work))
        return _result(f"5b. the same {n} epilogs reporting to the service ({workers} workers)", n, run, engine,
                       f"bound: {workers} workers x {pool} pooled connections", workers * pool + 2,
                       ["peak connections counts the benchmark's own monitoring connection; the service's and the "
                        "database server's CPU are not in the epilogs' figure (they are the notes after it)"], meter)
    finally:
        svc.stop()
        engine.dispose()
        pg.stop()
