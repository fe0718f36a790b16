"""Benchmarks against the physical baselines, side by side in one run; writes docs/performance.md.

    python -m bench.run            # everything, full sizes (1 GB job log, 10M stored events, 512 epilogs)
    python -m bench.run --quick    # the same at small sizes, for a smoke test

Absolute times on a shared machine are noise; the ratios to a baseline measured in the same run are the result.
Every benchmark generates its own data and starts its own PostgreSQL (attribution.store.embedded) in a temp dir.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "attribution"


@dataclass
class Result:
    name: str
    ours: str
    baseline: str
    ratio: str
    target: str
    met: bool | None
    notes: list[str] = field(default_factory=list)


def timed(cmd: list[str], env: dict | None = None, stdout=subprocess.DEVNULL) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KB) and exit status of a command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE)
    _, status, rusage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.stderr.close()
    return wall, rusage.ru_maxrss, os.waitstatus_to_exitcode(status)


def median_of(n: int, fn) -> float:
    return statistics.median(fn() for _ in range(n))


def warm(paths) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


# -- 1. extraction throughput --------------------------------------------------------------------------------


def bench_extract(work: Path, quick: bool) -> Result:
    from attribution.rulepack.load import load_rules
    from bench.ere import rule_patterns
    from bench.gen import NODES, write_context, write_job_log, write_kernel_log

    size = (100 << 20) if quick else (1 << 30)
    bundle = work / "extract"
    write_context(bundle)
    job_faults = write_job_log(bundle / "job" / "slurm-1.out", size, 1e-4)
    k_lines = 20_000 if quick else 200_000
    k_faults = sum(write_kernel_log(bundle / "nodes" / n / "kernel.log", k_lines, 1e-4, seed=i)
                   for i, n in enumerate(NODES))
    files = [bundle / "job" / "slurm-1.out"] + [bundle / "nodes" / n / "kernel.log" for n in NODES]
    total = sum(f.stat().st_size for f in files)
    pats = work / "patterns.ere"
    pats.write_text("\n".join(rule_patterns(load_rules(ROOT / "rules"), ["job", "kernel", "fabricmanager"])) + "\n")
    warm(files)
    grep = ["grep", "-E", "-c", "-f", str(pats), *map(str, files)]
    counts = work / "grep.out"  # not /dev/null: GNU grep stops at the first match when its output is /dev/null
    ours = [str(BIN), "diagnose", str(bundle), "--json", "--max-symptoms", "20"]
    g, o, rss = [], [], []
    for _ in range(3):
        with open(counts, "wb") as out:
            g.append(timed(grep, stdout=out)[0])
        w, m, code = timed(ours)
        assert code == 0
        o.append(w)
        rss.append(m)
    gm, om = statistics.median(g), statistics.median(o)
    ratio = om / gm
    peak_mb = max(rss) / 1024
    return Result(
        f"1. extraction: diagnose over {total / 2**30:.2f} GB (job log + {len(NODES)} kernel logs, 0.01 % fault lines)",
        f"{om:.2f} s ({total / om / 2**20:.0f} MB/s), peak {peak_mb:.0f} MB",
        f"grep -E -c, same {len(pats.read_text().splitlines())} patterns: {gm:.2f} s",
        f"{ratio:.2f}x", "<= 2x grep, < 300 MB", ratio <= 2.0 and peak_mb < 300,
        [f"{job_faults + k_faults} fault lines inserted"])


# -- shared database -----------------------------------------------------------------------------------------


def database(work: Path, name: str):
    from sqlalchemy.engine import make_url

    from attribution.config import Settings
    from attribution.store.embedded import EmbeddedPostgres
    from attribution.store import migrate
    from attribution.store.db import Target, make_engine

    pg = EmbeddedPostgres(work / f"pg-{name}")
    url = pg.ensure_running()
    engine = make_engine(Target(make_url(url), True), Settings(), pool_size=4)
    migrate.upgrade(engine)
    return pg, engine, url


# -- 2. store throughput -----------------------------------------------------------------------------------------


def bench_store(work: Path, quick: bool) -> Result:
    import json
    from datetime import timedelta

    from sqlalchemy import text

    from attribution.model import Event
    from attribution.pipeline import diagnose_bundle, ingest
    from attribution.rulepack.load import load_rules
    from attribution.store.codec import fingerprint
    from attribution.store.links import node_key
    from attribution.store.writer import EVENT_COLUMNS

    rs = load_rules(ROOT / "rules")
    d = diagnose_bundle(rs, ROOT / "tests" / "incidents" / "02-xid48-dbe-ecc-xid31")
    protos = list(d.events)
    jobs = 20 if quick else 100
    per_job = 2000
    batches = []
    for j in range(jobs):
        ctx = type(d.context)(**{**{k: getattr(d.context, k) for k in d.context.__slots__},
                                 "cluster": f"bench{j}", "job_id": str(j)})
        evs = []
        for i in range(per_job):
            p = protos[i % len(protos)]
            t = (p.time or d.context.end) - timedelta(seconds=i % 600)
            evs.append(Event(**{**{k: getattr(p, k) for k in p.__slots__}, "time": t,
                                "location": f"{p.location}#{i}", "message": f"{p.message} #{i}"}))
        batches.append((ctx, evs))
    pg, engine, _ = database(work, "store")
    try:
        t0 = time.perf_counter()
        for ctx, evs in batches:
            ingest(rs, engine, ctx, evs, [], "bundle")
        ingest_s = time.perf_counter() - t0
        n = jobs * per_job
        rows = []
        for ctx, evs in batches:
            for e in evs:
                rows.append((e.time, fingerprint(ctx.cluster, e, "") + b"copy", ctx.cluster, e.node,
                             node_key(ctx.cluster, ctx.job_id, e), e.source,
                             e.kind, e.role, e.code, e.gpu, e.rank, True, e.outcome, e.action, e.severity, e.rule,
                             e.location, e.message, e.line, json.dumps(dict(e.fields))))
        with engine.begin() as c:
            raw = c.connection.driver_connection
            t0 = time.perf_counter()
            with raw.cursor().copy(f"COPY attribution.events ({', '.join(EVENT_COLUMNS)}) FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
        copy_s = time.perf_counter() - t0
        with engine.connect() as c:
            stored = c.execute(text("SELECT count(*) FROM attribution.events")).scalar()
    finally:
        engine.dispose()
        pg.stop()
    ours, base = n / ingest_s, n / copy_s
    return Result(f"2. store: {n:,} events in {jobs} jobs through ingest (dedup, links, rollups, re-attribution, "
                  f"verdict)", f"{ours:,.0f} events/s", f"COPY of the same rows: {base:,.0f} rows/s",
                  f"{ours / base:.2f} of COPY", ">= 0.5 of COPY", ours / base >= 0.5,
                  [f"{stored:,} rows in events after both"])


# -- 3. fleet queries as history grows ------------------------------------------------------------------------


def bench_fleet(work: Path, quick: bool) -> Result:
    from bench.history import fill, query_times

    sizes = (100_000, 1_000_000) if quick else (1_000_000, 10_000_000)
    pg, engine, _ = database(work, "fleet")
    try:
        times = {}
        stored = 0
        for size in sizes:
            fill(engine, start_index=stored, count=size - stored, hardware=(stored == 0))
            stored = size
            times[size] = query_times(engine)
    finally:
        engine.dispose()
        pg.stop()
    small, big = sizes
    rec_ratio = times[big]["recurring_faults"] / times[small]["recurring_faults"]
    plan_big = times[big]["drain_plan"]
    return Result(f"3. fleet queries at {small:,} and {big:,} stored events (52 weeks, 10,000 nodes, 80,000 GPUs)",
                  f"recurring_faults {times[small]['recurring_faults'] * 1000:.0f} -> "
                  f"{times[big]['recurring_faults'] * 1000:.0f} ms; drain plan {times[small]['drain_plan'] * 1000:.0f}"
                  f" -> {plan_big * 1000:.0f} ms",
                  f"the same queries at {small:,} events", f"{rec_ratio:.2f}x (recurring), drain plan "
                  f"{plan_big * 1000:.0f} ms", "<= 2x; drain plan < 100 ms", rec_ratio <= 2 and plan_big < 0.1,
                  [f"node_faults_weekly {times[small]['node_faults_weekly'] * 1000:.0f} -> "
                   f"{times[big]['node_faults_weekly'] * 1000:.0f} ms (not a target)"])


# -- 4. hook cost ----------------------------------------------------------------------------------------------


def _hook_env(work: Path, kernel: Path, extra: dict) -> dict:
    env_file = work / "hook.env"
    env_file.write_text(f"ATTRIBUTION_BIN={BIN}\nATTRIBUTION_KERNEL_FILE={kernel}\n"
                        f"ATTRIBUTION_FM_LOG={work}/fabricmanager.log\nATTRIBUTION_STATE_DIR={work}/state\n"
                        f"ATTRIBUTION_LOG={work}/hooks.log\nATTRIBUTION_HOME={work}/home\n"
                        + "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in extra.items()))  # bash sources it
    return {"ATTRIBUTION_HOOK_ENV": str(env_file), "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "g001",
            "SLURM_NODELIST": "g[001-008]", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_CLUSTER_NAME": "bench"}


def bench_hook(work: Path, quick: bool) -> Result:
    from bench.gen import write_kernel_log

    hook = work / "hook"
    hook.mkdir()
    clean = hook / "clean.log"
    write_kernel_log(clean, 100_000, 0)
    env = _hook_env(hook, clean, {})
    (hook / "state").mkdir()
    size = clean.stat().st_size
    runs = 20 if quick else 100

    def run_clean():
        (hook / "state" / "job-77.start").write_text(f"start=1\nkernel_offset={size - 2000}\n")
        return timed(["/bin/bash", str(ROOT / "hooks" / "epilog")], env=dict(env, SLURM_JOB_EXIT_CODE="0"))[0]

    clean_ms = median_of(runs, run_clean) * 1000
    true_ms = median_of(runs, lambda: timed(["/bin/true"])[0]) * 1000
    python_started = (hook / "home").exists()
    big = hook / "big.log"
    write_kernel_log(big, 100_000 if quick else 1_000_000, 0, xid79_at=(50_000 if quick else 700_000))
    pg, engine, url = database(hook, "hook")
    engine.dispose()
    try:
        env_f = _hook_env(hook, big, {"ATTRIBUTION_DATABASE_URL": url, "ATTRIBUTION_BUDGET": "20"})
        (hook / "state" / "job-77.start").unlink(missing_ok=True)
        fail_s, _, code = timed(["/bin/bash", str(ROOT / "hooks" / "epilog")],
                                env=dict(env_f, SLURM_JOB_EXIT_CODE="256", SLURM_JOB_START_TIME="1773129600"))
        last = (hook / "hooks.log").read_text().strip().splitlines()[-1]
    finally:
        pg.stop()
    ok = clean_ms < 20 and not python_started and fail_s < 2 and "stored" in last
    return Result(f"4. node epilog: clean job (100k-line kernel log) / failed job ({'100k' if quick else '1M'}-line "
                  f"kernel log, one Xid 79)",
                  f"clean: median {clean_ms:.1f} ms, no Python; failed: {fail_s:.2f} s incl. the store write",
                  f"/bin/true: median {true_ms:.1f} ms", f"clean {clean_ms / true_ms:.1f}x /bin/true",
                  "clean < 20 ms without Python; failed < 2 s", ok, [last])


# -- 5. a thousand epilogs at once -------------------------------------------------------------------------------


def _forked_epilog(env: dict, argv: list[str], out: Path) -> int:
    """Fork a child that runs `attribution epilog` from this already-imported interpreter (shared pages: 512
    separate interpreters would need ~40 GB here, 512 real nodes have one each) with its own environment, its
    own output file and its own database connection. Returns the child's pid."""
    from attribution.cli import main as cli

    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ.clear()
        os.environ.update(env)
        try:
            cli.main(argv, prog_name="attribution", standalone_mode=False)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
    finally:
        os._exit(code)


def _storm_logs(storm: Path, n: int) -> list[Path]:
    from bench.gen import write_kernel_log

    logs = []
    for i in range(n):
        p = storm / f"kernel-{i}.log"
        write_kernel_log(p, 2_000, 0, seed=i, xid79_at=1_000 if i == 7 else None)
        logs.append(p)
    return logs


def _run_storm(storm: Path, n: int, logs: list[Path], engine, base_env: dict) -> tuple[float, int, list[str], float]:
    """Fork the n epilogs at once; wall time until the last one ends, peak connections to the database, outputs,
    and the CPU seconds the epilog processes used themselves."""
    from sqlalchemy import text

    pids = []
    peak = 0
    t0 = time.perf_counter()
    for i in range(n):
        env = dict(base_env, ATTRIBUTION_HOME=str(storm / f"home-{i}"),
                   SLURM_JOB_ID="4242", SLURMD_NODENAME=f"n{i:04d}", SLURM_NODELIST=f"n[0000-{n - 1:04d}]",
                   SLURM_JOB_EXIT_CODE="256", SLURM_SCRIPT_CONTEXT="epilog_slurmd", SLURM_CLUSTER_NAME="storm",
                   SLURM_JOB_START_TIME="1773129600")
        pids.append(_forked_epilog(env, ["epilog", "--budget", "120", "--kernel-file", str(logs[i])],
                                   storm / f"out-{i}.txt"))
    left = set(pids)
    cpu = 0.0
    while left:
        with engine.connect() as c:
            peak = max(peak, c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                            "current_database()")).scalar())
        for pid in list(left):
            done, _, usage = os.wait4(pid, os.WNOHANG)
            if done:
                left.discard(pid)
                cpu += usage.ru_utime + usage.ru_stime
        time.sleep(0.2)
    total = time.perf_counter() - t0
    return total, peak, [(storm / f"out-{i}.txt").read_text() for i in range(n)], cpu


def _storm_result(name: str, n: int, run: tuple, engine, baseline: str, bound: int, notes: list[str]) -> Result:
    total, peak, outputs, cpu = run
    from sqlalchemy import text

    with engine.connect() as c:
        cov = c.execute(text("SELECT count(DISTINCT node_key) FROM attribution.coverage")).scalar()
        verdict = c.execute(text("SELECT outcome, root_node FROM attribution.job_verdicts")).first()
        verdicts = c.execute(text("SELECT count(*) FROM attribution.verdicts")).scalar()
    stored = sum("; stored;" in o for o in outputs)
    spooled = sum("spooled" in o for o in outputs)
    ok = cov == n and stored == n and peak <= bound and verdict is not None and verdict[1] == "n0007"
    return Result(name, f"{total:.1f} s for all; {stored} stored directly, {spooled} spooled; peak {peak} connections",
                  baseline, f"{n / total:.1f} epilogs/s", "all observations stored, connections bounded", ok,
                  [f"coverage rows for {cov} nodes; verdict {verdict[0]} on {verdict[1]}" if verdict
                   else "no verdict",
                   f"{verdicts} verdict row(s) in the job's history (one each time the verdict changed)",
                   f"the epilog processes used {cpu:.1f} CPU seconds ({cpu / n * 1000:.0f} ms each: Python, reading "
                   f"and extracting the log, the client side of the store); on this machine's {os.cpu_count()} "
                   f"cores that alone takes {cpu / (os.cpu_count() or 1):.1f} s of the wall time, where {n} real "
                   f"nodes run theirs in parallel", *notes])


def _storm_setup(work: Path, name: str, quick: bool):
    """The storm's node count, folder, database and kernel logs, with attribution imported before forking."""
    import attribution.cli.hooks  # noqa: F401  (imported before forking, shared by every child)
    from attribution.rulepack.load import load_rules

    load_rules(ROOT / "rules").prefilter("kernel").find(b"warm-up\n")
    n = int(os.environ.get("BENCH_STORM_NODES", 32 if quick else 512))
    storm = work / name
    storm.mkdir()
    pg, engine, url = database(storm, "storm")
    return n, storm, pg, engine, url, _storm_logs(storm, n)


def bench_storm(work: Path, quick: bool) -> Result:
    n, storm, pg, engine, url, logs = _storm_setup(work, "storm", quick)
    try:
        from sqlalchemy import text

        with engine.connect() as c:
            max_conn = int(c.execute(text("SHOW max_connections")).scalar())
        run = _run_storm(storm, n, logs, engine, dict(os.environ, ATTRIBUTION_DATABASE_URL=url))
        return _storm_result(f"5. {n} node epilogs of one failed job started together against one database", n,
                             run, engine, f"max_connections {max_conn} (embedded default)",
                             max_conn, ["each epilog is a child forked from one interpreter that imported "
                                        "attribution (copy-on-write); its own environment, output, rule use, log "
                                        "read and database connection"])
    finally:
        engine.dispose()
        pg.stop()


def bench_storm_service(work: Path, quick: bool) -> Result:
    """The same storm, the hooks reporting to `attribution serve` (2 workers, 8 connections each) instead."""
    from tests.harness.service import start_service

    n, storm, pg, engine, url, logs = _storm_setup(work, "storm-service", quick)
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
        env = {k: v for k, v in os.environ.items() if k != "ATTRIBUTION_DATABASE_URL"}
        run = _run_storm(storm, n, logs, engine, dict(env, ATTRIBUTION_CONFIG=str(cfg)))
        return _storm_result(f"5b. the same {n} epilogs reporting to the service ({workers} workers)", n, run,
                             engine, f"bound: {workers} workers x {pool} pooled connections", workers * pool + 2,
                             ["peak connections counts the benchmark's own monitoring connection"])
    finally:
        svc.stop()
        engine.dispose()
        pg.stop()


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


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {platform.platform()}, Python {platform.python_version()}"


def write_report(results: list[Result], quick: bool, path: Path) -> str:
    lines = ["# Performance", "",
             "Measured by `python -m bench.run` (one command, generates its own data and databases) "
             f"{'with --quick (small sizes)' if quick else 'at full size'} on {time.strftime('%Y-%m-%d')}.", "",
             f"Machine: {machine()}. Shared and noisy: read the ratios to the baselines measured in the same run.", "",
             "| benchmark | ours | baseline (same run) | ratio | target | met |", "|---|---|---|---|---|---|"]
    for r in results:
        met = {True: "yes", False: "**no**", None: "-"}[r.met]
        lines.append(f"| {r.name} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {met} |")
    lines.append("")
    for r in results:
        for note in r.notes:
            lines.append(f"- {r.name.split(':')[0]}: {note}")
    text = "\n".join(lines) + "\n"
    existing = path.read_text() if path.exists() else ""
    marker = "\n## How these numbers are made"
    tail = existing[existing.index(marker):] if marker in existing else ""
    path.write_text(text + tail)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test of the benchmarks)")
    ap.add_argument("--only", nargs="*", default=None, help="extract store fleet hook storm storm-service correlate")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    benches = {"extract": bench_extract, "store": bench_store, "fleet": bench_fleet, "hook": bench_hook,
               "storm": bench_storm, "storm-service": bench_storm_service, "correlate": bench_correlate}
    chosen = args.only or list(benches)
    results = []
    with tempfile.TemporaryDirectory(prefix="attribution-bench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        for name in chosen:
            print(f"== {name}", flush=True)
            t0 = time.perf_counter()
            r = benches[name](work, args.quick)
            print(f"   {r.ours} | {r.baseline} | {r.ratio} | target {r.target} | met {r.met} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
            results.append(r)
    print(write_report(results, args.quick, args.out))
    return 0 if all(r.met is not False for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
