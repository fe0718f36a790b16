"""What a node spends on a job's end: `hooks/epilog` as slurmd runs it, a fresh process each time.

- the clean job (exit 0, nothing suspicious in the kernel log since the prolog): greps, no Python;
- the failed job: every CPU cycle the node spends on it, counted in a cgroup of the hook's own (bench/cpu.py):
  bash, the grep filter, the Python agent, whatever any of them starts or leaves behind, and delivering the
  report, to PostgreSQL directly or to `attribution serve` (whose own CPU, like the database server's, is not the
  node's and is not counted);
- the same on a 1,000,000-line kernel log (the whole path's wall time).
"""

from __future__ import annotations

import shlex
import statistics
from datetime import datetime, timezone
from pathlib import Path

from bench.cpu import CpuMeter
from bench.report import BIN, ROOT, Result, node_bin

HOOK = ROOT / "hooks" / "epilog"


def hook_env(work: Path, kernel: Path, extra: dict, agent: Path = BIN) -> dict:
    """The environment slurmd gives the epilog, and the hook.env our install writes (bash sources it); `agent` is
    the `attribution` it runs (bench.report.node_bin: as installed on a node)."""
    env_file = work / "hook.env"
    env_file.write_text(f"ATTRIBUTION_BIN={agent}\nATTRIBUTION_KERNEL_FILE={kernel}\n"
                        f"ATTRIBUTION_FM_LOG={work}/fabricmanager.log\nATTRIBUTION_STATE_DIR={work}/state\n"
                        f"ATTRIBUTION_LOG={work}/hooks.log\nATTRIBUTION_HOME={work}/home\n"
                        + "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in extra.items()))
    return {"ATTRIBUTION_HOOK_ENV": str(env_file), "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "g001",
            "SLURM_NODELIST": "g[001-008]", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_CLUSTER_NAME": "bench"}


def _last_line(work: Path) -> str:
    lines = (work / "hooks.log").read_text().strip().splitlines()
    return lines[-1] if lines else ""


def bench_hook(work: Path, quick: bool) -> Result:
    """The clean job's cost, and the failed job's on a long kernel log."""
    from bench.gen import write_kernel_log
    from bench.store import database

    meter = CpuMeter()
    hook = work / "hook"
    hook.mkdir()
    clean = hook / "clean.log"
    write_kernel_log(clean, 100_000, 0)
    agent = node_bin(work)
    env = hook_env(hook, clean, {}, agent)
    (hook / "state").mkdir()
    size = clean.stat().st_size
    runs = 20 if quick else 100

    def run_clean():
        (hook / "state" / "job-77.start").write_text(f"start=1\nkernel_offset={size - 2000}\n")
        return meter.run(["/bin/bash", str(HOOK)], env=dict(env, SLURM_JOB_EXIT_CODE="0"))

    clean_runs = [run_clean() for _ in range(runs)]
    true_runs = [meter.run(["/bin/true"]) for _ in range(runs)]
    clean_ms = statistics.median(r[0] for r in clean_runs) * 1000
    clean_cpu = statistics.median(r[1] for r in clean_runs) * 1000
    true_ms = statistics.median(r[0] for r in true_runs) * 1000
    python_started = (hook / "home").exists()
    big = hook / "big.log"
    write_kernel_log(big, 100_000 if quick else 1_000_000, 0, xid79_at=(50_000 if quick else 700_000))
    pg, engine, url = database(hook, "hook")
    engine.dispose()
    try:
        env_f = hook_env(hook, big, {"ATTRIBUTION_DATABASE_URL": url, "ATTRIBUTION_BUDGET": "20"}, agent)
        (hook / "state" / "job-77.start").unlink(missing_ok=True)
        fail_s, fail_cpu, _ = meter.run(["/bin/bash", str(HOOK)],
                                        env=dict(env_f, SLURM_JOB_EXIT_CODE="256", SLURM_JOB_START_TIME="1773129600"))
        last = _last_line(hook)
    finally:
        pg.stop()
    ok = clean_cpu < 20 and not python_started and fail_s < 2 and "stored" in last
    return Result(f"7. node epilog hook: clean job (100k-line kernel log) / failed job ({'100k' if quick else '1M'}-line "
                  f"kernel log, one Xid 79)",
                  f"clean: median {clean_ms:.1f} ms ({clean_cpu:.1f} ms CPU), no Python; failed: {fail_s:.2f} s "
                  f"({fail_cpu:.2f} s CPU) incl. the store write",
                  f"/bin/true: median {true_ms:.1f} ms", f"clean {clean_ms / true_ms:.1f}x /bin/true",
                  "clean < 20 ms CPU without Python; failed < 2 s", ok,
                  [last, f"CPU counted with {meter.describe()}"])


def _failed_job_log(path: Path) -> None:
    """This node's kernel log: 2,000 lines of noise with one Xid 79 in the job's time (now)."""
    from bench.gen import write_kernel_log

    write_kernel_log(path, 2_000, 0, seed=3)
    stamp = datetime.now(timezone.utc).strftime("[%a %b %e %H:%M:%S %Y]")
    with open(path, "a") as f:
        f.write(f"{stamp} NVRM: Xid (PCI:0000:9d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                f"the bus.\n")


def epilog_cpu(meter: CpuMeter, work: Path, name: str, extra: dict, runs: int, first_job: int,
               agent: Path = BIN, done: str = "stored") -> dict:
    """`hooks/epilog` of a failed job `runs` times (a new job each time), after a first run that fills the node
    agent's caches (the first failed job on a node compiles the rule pack once). CPU of each run's cgroup."""
    import time

    base = work / name
    (base / "state").mkdir(parents=True)
    kern = base / "kern.log"
    _failed_job_log(kern)
    env = hook_env(base, kern, dict(extra, ATTRIBUTION_BUDGET="20"), agent)
    cpu, wall = [], []
    first = None
    for i in range(runs + 1):
        job = first_job + i
        start = int(time.time()) - 600
        (base / "state" / f"job-{job}.start").write_text(f"start={start}\nkernel_offset=0\n")
        w, c, code = meter.run(["/bin/bash", str(HOOK)],
                               env=dict(env, SLURM_JOB_ID=str(job), SLURM_JOB_EXIT_CODE="256",
                                        SLURM_JOB_START_TIME=str(start), SLURM_NODELIST="g001"))
        last = _last_line(base)
        if f"job {job};" not in last or done not in last:
            raise RuntimeError(f"{name}: the epilog of job {job} did not say {done!r}: {last}")
        if i == 0:
            first = c
        else:
            cpu.append(c)
            wall.append(w)
    return {"cpu": statistics.median(cpu), "min": min(cpu), "max": max(cpu), "wall": statistics.median(wall),
            "first": first, "last": last}


def bench_epilog_cpu(work: Path, quick: bool) -> Result:
    """Target 2: the CPU a node spends on one failed job, to PostgreSQL and to the service."""
    from bench.store import database
    from tests.harness.service import start_service

    meter = CpuMeter()
    runs = 7 if quick else 21
    pg, engine, url = database(work, "epilog-cpu")
    engine.dispose()
    svc = start_service(url, work / "epilog-service", workers=1)
    try:
        token = work / "report.token"
        token.write_text(svc.tokens["report"] + "\n")
        token.chmod(0o600)
        cfg = work / "hooks-service.yaml"
        cfg.write_text(f"service_url: {svc.url}\nservice_token_file: {token}\n")
        agent = node_bin(work)
        db = epilog_cpu(meter, work, "epilog-db", {"ATTRIBUTION_DATABASE_URL": url}, runs, 5000, agent)
        service = epilog_cpu(meter, work, "epilog-svc", {"ATTRIBUTION_CONFIG": cfg}, runs, 6000, agent)
    finally:
        svc.stop()
        pg.stop()
    true_cpu = statistics.median(meter.run(["/bin/true"])[1] for _ in range(runs))
    ok = db["cpu"] <= 0.100 and service["cpu"] <= 0.050
    return Result(
        "2. node epilog CPU of one failed job: hooks/epilog as slurmd runs it (bash, grep, the agent, "
        "delivering the report; a 2,000-line kernel log with one Xid 79)",
        f"to the service: median {service['cpu'] * 1000:.0f} ms "
        f"({service['min'] * 1000:.0f}-{service['max'] * 1000:.0f}); to PostgreSQL directly (the ingest on the "
        f"node): median {db['cpu'] * 1000:.0f} ms ({db['min'] * 1000:.0f}-{db['max'] * 1000:.0f})",
        f"/bin/true in the same meter: {true_cpu * 1000:.1f} ms",
        f"{service['cpu'] * 1000:.0f} ms (direct {db['cpu'] * 1000:.0f} ms)",
        "<= 100 ms to PostgreSQL, <= 50 ms to the service", ok,
        [f"CPU counted with {meter.describe()}; {runs} runs each, a new failed job each time, after one run that "
         f"filled the caches (that first run: {db['first'] * 1000:.0f} ms to PostgreSQL, "
         f"{service['first'] * 1000:.0f} ms to the service); the counter snapshot included (no nvidia-smi on this "
         f"machine: a GPU node adds its query, bench/hook_snapshot.py)",
         f"wall time, median: {db['wall'] * 1000:.0f} ms to PostgreSQL directly, {service['wall'] * 1000:.0f} ms "
         f"to the service",
         f"last hook log lines: {db['last']} | {service['last']}"])


__all__ = ["bench_hook", "bench_epilog_cpu", "hook_env", "epilog_cpu"]
