"""What a node spends on a job's end: the installed `hooks/epilog` as slurmd runs it, a fresh process each time.

- target 2, the failed job: every CPU cycle the node spends on it, counted in a cgroup of the hook's own
  (bench/cpu.py): bash, the counter snapshot of a faked 8-GPU/8-HCA node, the node collector and its POST to a real
  `attribution serve` on a real PostgreSQL. Beside it, in the same meter and the same minutes: /bin/true, and the
  strongest fair baseline for the same delivery, the shell alone (`LC_ALL=C grep -F -C 16 -f suspicious.patterns`
  on the same log, then curl POSTing the same document bytes to the same endpoint). The service's own CPU is
  counted apart (its process tree in a cgroup of its own) and shown per report.
- target 7, the clean job: the hook's grep finds nothing, no Python starts; and a failed job on a
  1,000,000-line kernel log (the whole path's wall time).
"""

from __future__ import annotations

import re
import statistics
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.cpu import CpuMeter
from bench.nodeside import (BenchNode, SafeRoot, fake_node, install_node, job_window, tree_pids, write_job_kernel_log,
                            write_private)
from bench.report import Result

CURL = "/usr/bin/curl"
#: The shell baseline of target 2: the hook's filter over the job's log with the collector's context, then the
#: document POSTed (arguments: filter, log, kept lines' file, header file, document, URL)
BASELINE = """#!/bin/bash
LC_ALL=C /usr/bin/grep -F -C 16 -f "$1" -- "$2" >"$3"
exec /usr/bin/curl -sS --fail -o /dev/null -H @"$4" -H 'Content-Type: application/json' --data-binary @"$5" "$6"
"""


def _service(work: Path, name: str, cluster: str, nodes: str, workers: int = 2, **service):
    """A migrated embedded PostgreSQL and `attribution serve` on it; the report token is bound to `cluster` and
    `nodes`, as production's are (docs/service.md). (pg, engine, service, token)."""
    import secrets

    from bench.store import database
    from tests.harness.service import start_service

    pg, engine, url = database(work, name)
    token = secrets.token_hex(24)
    try:
        svc = start_service(url, work / f"{name}-service", workers=workers, service=service or None,
                            extra_tokens=f"report {token} bench-nodes cluster={cluster} nodes={nodes}\n")
    except BaseException:
        engine.dispose()
        pg.stop()
        raise
    return pg, engine, svc, token


class _Capture(BaseHTTPRequestHandler):
    """Answers every POST as the service does when it stores a document, and keeps the body."""
    bodies: list[bytes] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        body = b'{"job":{},"new_events":1}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def captured_document(node: BenchNode, job: str, start: float, end: float) -> bytes:
    """The bytes the collector POSTs for one failed job (the same hook, pointed at a recorder for one run)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    _Capture.bodies = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = node.url
    try:
        node.set_url(f"http://127.0.0.1:{server.server_address[1]}")
        node.prolog(job, start)
        write_job_kernel_log(node.kernel, start, end)
        import subprocess

        subprocess.run(node.hook("epilog"), env=node.env(job, "256", start), timeout=120, check=True)
    finally:
        server.shutdown()
        server.server_close()
        node.set_url(url)
    if len(_Capture.bodies) != 1:
        raise RuntimeError(f"the collector posted {len(_Capture.bodies)} documents, not one: {node.last_line()}")
    return _Capture.bodies[0]


def imported_modules(node: BenchNode, job: str, start: float, end: float) -> list[str]:
    """The top-level modules one collector run imports (python -X importtime through the hook's environment)."""
    import subprocess

    node.prolog(job, start)
    write_job_kernel_log(node.kernel, start, end)
    before = node.log.read_text() if node.log.exists() else ""
    subprocess.run(node.hook("epilog"), env=dict(node.env(job, "256", start), PYTHONPROFILEIMPORTTIME="1"),
                   timeout=120, check=True)
    text = node.log.read_text()[len(before):]
    names = [m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| (\S+)$", text, re.M)]
    if "stored" not in node.last_line() or not names:
        raise RuntimeError(f"no import list from the collector: {node.last_line()}")
    return [n for n in names if not n.startswith("_frozen") and n not in ("zipimport", "site", "encodings")]


def bench_epilog_cpu(work: Path, quick: bool) -> Result:
    """Target 2: the CPU a node spends on one failed job reporting to the service, from the installed artifact."""
    import shutil

    if not shutil.which("curl", path="/usr/bin"):
        raise RuntimeError(f"{CURL} is needed for the baseline of target 2 (apt-get install curl)")
    meter = CpuMeter()
    runs = 5 if quick else 21
    install = install_node(work)
    pg, engine, svc, token = _service(work, "epilog-cpu", "bench", "g001")
    root = SafeRoot()
    service_cg = meter.group()
    try:
        service_cg.adopt(tree_pids(svc.process.pid))
        token_file = write_private(root.path / "report.token", token + "\n")
        fake, fake_env = fake_node(root.path / "fake")
        node = BenchNode(root, install, fake_env, svc.url, token_file)
        script = root.path / "baseline.sh"
        script.write_text(BASELINE)
        script.chmod(0o755)
        headers = write_private(root.path / "headers.txt", f"Authorization: Bearer {token}\n")
        start, end = job_window()
        doc = captured_document(node, "90001", start, end)
        modules = imported_modules(node, "90002", start, end)
        imports = ["import " + ", ".join(modules)]
        py = str(install.venv / "bin" / "python")
        # the warm-up: one failed job through the service (its first report builds the service's caches)
        node.prolog("90003", start)
        write_job_kernel_log(node.kernel, start, end)
        meter.run(node.hook("epilog"), env=node.env("90003", "256", start))
        got: dict[str, list] = {k: [] for k in ("hook", "base", "true", "clean", "pass", "imports")}
        service_cpu = 0.0
        for i in range(runs):
            job = str(7000 + i)
            start, end = job_window()
            node.prolog(job, start)
            write_job_kernel_log(node.kernel, start, end)
            cpu0 = service_cg.cpu()
            got["hook"].append(meter.run(node.hook("epilog"), env=node.env(job, "256", start)))
            service_cpu += service_cg.cpu() - cpu0
            last = node.last_line()
            if f"node job {job};" not in last or "; stored" not in last:
                raise RuntimeError(f"the epilog of job {job} did not store its report: {last}")
            # the baseline: the same log, the same document as a new job (its id replaced) to the same endpoint
            body = root.path / "document.json"
            body.write_bytes(doc.replace(b'"SLURM_JOB_ID":"90001"', f'"SLURM_JOB_ID":"{8000 + i}"'.encode()))
            w, c, rc = meter.run([str(script), str(install.hooks / "suspicious.patterns"), str(node.kernel),
                                  str(root.path / "kept.txt"), str(headers), str(body), svc.url + "/v1/observations"],
                                 env={})
            if rc != 0:
                raise RuntimeError(f"the baseline's POST failed with status {rc}")
            got["base"].append((w, c, rc))
            got["true"].append(meter.run(["/bin/true"], env={}))
            # the parts: the clean job's hook on the same node (bash, snapshot, grep: no Python), the node
            # interpreter's start, and the same start importing what a collector run imports
            cjob = str(9000 + i)
            node.prolog(cjob, start)
            write_job_kernel_log(node.kernel, start, end, xid79_at=None)
            got["clean"].append(meter.run(node.hook("epilog"), env=node.env(cjob, "0", start)))
            got["pass"].append(meter.run([py, "-c", "pass"], env={}))
            got["imports"].append(meter.run([py, "-c", imports[0]], env={}))
        spooled = node.spooled()
        third = install.third_party()
    finally:
        svc.stop()
        engine.dispose()
        pg.stop()
        service_cg.close()
        root.close()
    cpu = {k: statistics.median(r[1] for r in v) * 1000 for k, v in got.items()}
    lo, hi = (min(r[1] for r in got["hook"]) * 1000, max(r[1] for r in got["hook"]) * 1000)
    wall = {k: statistics.median(r[0] for r in v) * 1000 for k, v in got.items()}
    ok = cpu["hook"] <= 80 and not spooled and not third
    return Result(
        "2. node epilog CPU of one failed job: the installed hooks/epilog as slurmd runs it (bash, the counter "
        "snapshot of an 8-GPU/8-HCA node, the node collector, its POST to `attribution serve`; a 2,000-line kernel "
        "log with one Xid 79)",
        f"median {cpu['hook']:.0f} ms CPU ({lo:.0f}-{hi:.0f}), wall {wall['hook']:.0f} ms; the service "
        f"{service_cpu / runs * 1000:.0f} ms per report (not the node's)",
        f"shell alone (grep -F -C 16 + curl, the same document): {cpu['base']:.1f} ms; /bin/true: "
        f"{cpu['true']:.1f} ms",
        f"{cpu['hook'] / cpu['base']:.1f}x the shell baseline, {cpu['hook'] / cpu['true']:.0f}x /bin/true",
        "<= 80 ms CPU to the service", ok,
        [f"CPU counted with {meter.describe()}; {runs} runs, each a new failed job after its prolog (the counter "
         f"snapshot at start), interleaved with the baselines, after one run that warmed the service; the service's "
         f"process tree in a cgroup of its own",
         f"where the {cpu['hook']:.0f} ms go (medians, same meter and minutes): the clean job's hook on the same "
         f"node (bash, lib.sh, the snapshot, the grep; no Python) {cpu['clean']:.0f} ms; the node venv's "
         f"`python -c pass` {cpu['pass']:.0f} ms; the same importing the {len(modules)} modules a collector run "
         f"imports ({', '.join(modules)}) {cpu['imports']:.0f} ms; the rest (reading, selecting, the spool, "
         f"the POST) about {cpu['hook'] - cpu['clean'] - cpu['imports']:.0f} ms",
         f"wall time, median: the hook {wall['hook']:.0f} ms (waiting for the service's answer included), the "
         f"shell baseline {wall['base']:.0f} ms",
         f"the document: {len(doc):,} bytes (the kept kernel lines and both counter snapshots); the node install: "
         f"the wheel's base install, third-party distributions: {', '.join(third) or 'none'}; spooled: {spooled}",
         f"the shell baseline does less than the hook: no counter snapshot, no spool file, no error-looking "
         f"lines (hooks/error-lines.patterns), no bounds; it is the floor for shipping the same bytes",
         f"last hook log line: {last}"])


def bench_hook(work: Path, quick: bool) -> Result:
    """Target 7: the clean job's cost (no Python), and a failed job's on a long kernel log."""
    from bench.gen import write_kernel_log

    meter = CpuMeter()
    runs = 20 if quick else 100
    install = install_node(work)
    pg, engine, svc, token = _service(work, "hook", "bench", "g00[1-2]")
    root = SafeRoot()
    try:
        token_file = write_private(root.path / "report.token", token + "\n")
        fake, fake_env = fake_node(root.path / "fake")
        node = BenchNode(root, install, fake_env, svc.url, token_file)
        bare = BenchNode(root, install, "", svc.url, token_file, name="g002", telemetry="off")
        history = root.path / "history.log"
        write_kernel_log(history, 100_000, 0)
        got: dict[str, list] = {"clean": [], "bare": [], "true": [], "smi": []}
        for i in range(runs):
            start, end = job_window()
            for key, n in (("clean", node), ("bare", bare)):
                job = str(100 + i)
                n.kernel.write_bytes(history.read_bytes())  # 100,000 lines before the job ...
                n.prolog(job, start, keep_log=True)
                write_job_kernel_log(n.kernel, start, end, xid79_at=None, append=True)  # ... and the job's 2,000
                got[key].append(meter.run(n.hook("epilog"), env=n.env(job, "0", start)))
            got["true"].append(meter.run(["/bin/true"], env={}))
            # the faked tool alone (a shell script and cat): inside the clean figure, not the hook's own work
            got["smi"].append(meter.run([str(fake.nvidia_smi), "-q", "-x"], env={}))
        python_started = node.log.exists() or bare.log.exists() or node.spool.exists()
        left = sorted(p.name for p in node.state.iterdir())
        big_lines = 100_000 if quick else 1_000_000
        start, end = job_window()
        node.prolog("77", start)
        write_job_kernel_log(node.kernel, start, end, lines=big_lines, xid79_at=big_lines * 7 // 10)
        fail_s, fail_cpu, _ = meter.run(node.hook("epilog"), env=node.env("77", "256", start))
        last = node.last_line()
    finally:
        svc.stop()
        engine.dispose()
        pg.stop()
        root.close()
    cpu = {k: statistics.median(r[1] for r in v) * 1000 for k, v in got.items()}
    wall = {k: statistics.median(r[0] for r in v) * 1000 for k, v in got.items()}
    ok = cpu["clean"] < 20 and not python_started and not left and fail_s < 2 and "; stored" in last
    return Result(
        f"7. node epilog hook, installed: clean job (its 2,000 lines after 100,000 older ones, the 8-GPU/8-HCA "
        f"node's counter snapshot compared with the prolog's) / failed job ({big_lines // 1000:,}k-line kernel "
        f"log, one Xid 79)",
        f"clean: median {cpu['clean']:.1f} ms CPU (wall {wall['clean']:.1f} ms), no Python; without the counter "
        f"snapshot {cpu['bare']:.1f} ms; failed: {fail_s:.2f} s ({fail_cpu:.2f} s CPU) to the service",
        f"/bin/true: {cpu['true']:.1f} ms CPU", f"clean {cpu['clean'] / cpu['true']:.1f}x /bin/true",
        "clean < 20 ms CPU without Python; failed < 2 s", ok,
        [last, f"CPU counted with {meter.describe()}; {runs} runs of each, interleaved; state left after the clean "
               f"jobs: {left or 'none'}",
         f"the faked `nvidia-smi -q -x` the clean job's snapshot runs (a shell script and `cat` printing the 8-GPU "
         f"document; a real one queries the driver and costs more), run alone the same way: {cpu['smi']:.1f} ms "
         f"(/bin/true {cpu['true']:.1f} ms)"])


__all__ = ["bench_hook", "bench_epilog_cpu", "captured_document"]
