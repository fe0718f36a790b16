"""hooks/ on a real Slurm cluster (slurmctld + two slurmd on this machine, started by the test setup), once on
Slurm 22.05 and once on 24.11 (the ``slurm`` fixture; on 24.11 the hooks run inside the Debian 13 root).

As deployed: each node's hooks run the node collector (`attribution-node`, standard library only), which reports
to a real `attribution serve` with a report token bound to this cluster and its two nodes; the controller's
hook runs the full `attribution epilog`, which writes to the database. Each node's kernel log is a file the test
writes (the hooks' 'file' kernel source). Every hook runs exactly as slurm.conf would run it, with no PATH and no
custom environment: a two-line wrapper only points it at its host's hook.env (one per node, in a folder only root
can change, as the hooks require).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ROOT
from tests.harness.fakenode import FakeNode, smi_document
from tests.harness.hooknode import Proxy, drop_safe_dir, safe_dir, url_via, write_private

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent / "attribution"
NODE_BIN = Path(sys.executable).parent / "attribution-node"
# seconds: the production default (PrologEpilogTimeout is typically 60+); a loaded 2-core machine needs it
BUDGET = 20
NODE_TOKEN = "f00dfeedf00dfeedf00dfeedf00dfeed"  # report, cluster=attrtest nodes=node[1-2]

XID79 = ("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")


#: EpilogSlurmctld starts at a cancel without waiting for the batch host to report the script's end; until that
#: report the controller's view of a cancelled job is a clean job's (hooks/README.md, "Limits"). A test that means
#: the case where the report came first creates this marker for its job, and the controller wrapper waits for the
#: report (ExitCode no longer 0:0, at most 60 s) before it runs the hook, whatever the machine's load.
AWAIT_REPORT = "await-report-"


def _wrapper(base: Path, etc: Path, name: str, hook: str) -> str:
    """What an operator's slurm.conf line would point at, plus this host's hook.env; it times each run."""
    p = base / f"{name}.sh"
    wait = (f"if [ -e {base}/{AWAIT_REPORT}$SLURM_JOB_ID ]; then\n"
            "  for _ in $(/usr/bin/seq 600); do\n"
            f"    SLURM_CONF={base}/slurm/slurm.conf /usr/bin/scontrol show job -o \"$SLURM_JOB_ID\" "
            "| /usr/bin/grep -q 'ExitCode=0:0 ' || break\n"
            "    /usr/bin/sleep 0.1\n"
            "  done\n"
            "fi\n") if name == "epilog-ctld" else ""
    p.write_text(
        "#!/bin/bash\n" + wait +
        f"t0=$(/usr/bin/date +%s%N)\n"
        f"ATTRIBUTION_HOOK_ENV={etc}/hook-${{SLURMD_NODENAME:-ctld}}.env {ROOT / 'hooks' / hook}\n"
        "rc=$?\n"
        f"echo \"$SLURM_JOB_ID ${{SLURMD_NODENAME:-ctld}} $rc $(( ($(/usr/bin/date +%s%N) - t0) / 1000000 ))\" "
        f">> {base}/runs-{name}.txt\n"
        "exit $rc\n")
    p.chmod(0o755)
    return str(p)


def _recorder(base: Path, name: str, target: Path) -> Path:
    """A recorder in front of a real command: it proves when Python is (not) started."""
    p = base / name
    p.write_text(f"#!/bin/bash\necho \"$SLURM_JOB_ID ${{SLURMD_NODENAME:-ctld}}\" >> {base}/calls/python.txt\n"
                 f"exec {target} \"$@\"\n")
    p.chmod(0o755)
    return p


def write_hook_envs(c, service_url: str) -> None:
    """Each host's hook.env: the nodes' point the collector at the service with the node token, the controller's
    at the full command and its configuration (the database)."""
    base = c.base
    for n in ("node1", "node2"):
        (c.etc / f"hook-{n}.env").write_text(
            f"ATTRIBUTION_BIN={c.node_recorder}\n"
            f"ATTRIBUTION_BUDGET={BUDGET}\n"
            "ATTRIBUTION_KERNEL_SOURCE=file\n"
            f"ATTRIBUTION_KERNEL_FILE={base}/kernel-{n}.log\n"
            f"ATTRIBUTION_FM_LOG={base}/fabricmanager-{n}.log\n"
            f"ATTRIBUTION_STATE_DIR={base}/state-{n}\n"
            f"ATTRIBUTION_SPOOL_DIR={base}/spool-{n}\n"
            f"ATTRIBUTION_LOG={base}/hooks.log\n"
            f"ATTRIBUTION_SERVICE_URL={service_url}\n"
            f"ATTRIBUTION_SERVICE_TOKEN_FILE={base}/node.token\n"
            "ATTRIBUTION_SERVICE_TIMEOUT=3\n"
            # each node's GPUs and HCAs: a faked sysfs tree and an nvidia-smi that prints a real-format document
            f"ATTRIBUTION_SYSFS_ROOT={base}/fake-{n}\n"
            f"ATTRIBUTION_NVIDIA_SMI={base}/fake-{n}/bin/nvidia-smi\n")
    (c.etc / "hook-ctld.env").write_text(
        f"ATTRIBUTION_CTLD_BIN={c.ctld_recorder}\n"
        f"ATTRIBUTION_BUDGET={BUDGET}\n"
        f"ATTRIBUTION_LOG={base}/hooks.log\n"
        f"ATTRIBUTION_CONFIG={base}/config.yaml\n"
        f"SLURM_CONF={base}/slurm/slurm.conf\n")
    for f in c.etc.iterdir():
        f.chmod(0o644)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm):
    # byte-compiled as an installed package is (pip compiles wheels): otherwise the first hooks of a fresh checkout
    # compile the whole package three at a time, and on a busy machine that alone can outlast BUDGET
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "attribution")], check=True,
                   capture_output=True, timeout=300)
    base = tmp_path_factory.mktemp("hooks")
    base.chmod(0o755)
    (base / "calls").mkdir()
    etc = safe_dir()  # under SAFE_ROOT, which the 24.11 root sees at the same path (the slurm fixture binds it)
    fakes = {}
    for n in ("node1", "node2"):
        (base / f"kernel-{n}.log").write_text("[Mon Nov 30 08:00:00 2026] Linux version 6.8.0 (boot)\n")
        fakes[n] = FakeNode(base / f"fake-{n}")  # 8 GPUs, 8 HCAs
        fakes[n].root.chmod(0o755)
    write_private(base / "node.token", NODE_TOKEN + "\n")
    c = slurm.cluster(base / "slurm", epilog=_wrapper(base, etc, "epilog", "epilog"),
                      epilog_slurmctld=_wrapper(base, etc, "epilog-ctld", "epilog-slurmctld"),
                      prolog=_wrapper(base, etc, "prolog", "prolog"), prolog_epilog_timeout=30,
                      prolog_flags="Alloc")  # the prolog runs on every node at allocation (hooks/README.md)
    c.install()
    c.start()
    c.base, c.etc, c.fakes = base, etc, fakes
    c.node_recorder = _recorder(base, "node-recorder", NODE_BIN)
    c.ctld_recorder = _recorder(base, "ctld-recorder", BIN)
    c.clients = slurm.clients(c, base / "clients")  # this Slurm's scontrol, for `attribution drain`
    try:
        yield c
    finally:
        drained = c.drained_nodes()
        c.stop()
        drop_safe_dir(etc)
        assert drained == [], f"nodes drained during the hook tests: {drained}"


@pytest.fixture(autouse=True)
def fresh_kernel_logs(cluster):
    """Each test starts with freshly booted nodes: faults written by an earlier test are gone."""
    for n in ("node1", "node2"):
        (cluster.base / f"kernel-{n}.log").write_text("[Mon Nov 30 08:00:00 2026] Linux version 6.8.0 (boot)\n")
        cluster.fakes[n].reset()


@pytest.fixture
def db(cluster, pg_url, tmp_path):
    """This test's database (fresh), the service over it that the nodes report to, and the controller's
    configuration writing to it; the engine the test reads with. `db.service` and `db.url` for the tests that
    put something between the hooks and them."""
    from tests.harness.service import start_service

    svc = start_service(pg_url, tmp_path / "service",
                        extra_tokens=f"report {NODE_TOKEN} nodes cluster=attrtest nodes=node[1-2]\n")
    (cluster.base / "config.yaml").write_text(f"home: {cluster.base}/home-ctld\ndatabase:\n  url: {pg_url}\n"
                                              "  connect_timeout: 2\n")
    write_hook_envs(cluster, svc.url)
    engine = create_engine(pg_url)
    engine.service, engine.db_url = svc, pg_url
    try:
        yield engine
    finally:
        engine.dispose()
        svc.stop()


def _job(cluster, script: str, nodes: int = 2) -> str:
    out = cluster.base / "jobs"
    out.mkdir(exist_ok=True)
    n = len(list(out.glob("*.sh")))
    path = out / f"job{n}.sh"
    path.write_text("#!/bin/bash\n" + script + "\n")
    path.chmod(0o755)
    return cluster.sbatch([f"-N{nodes}", "--gres=gpu:2", "--ntasks-per-node=2", f"-o{out}/slurm-%j.out", str(path)])


def _wait_runs(cluster, job: str, hooks: dict[str, int], timeout: float = 60) -> dict[str, list[list[str]]]:
    """Wait until each hook ran for the job the given number of times; their (node, rc, ms) rows."""
    deadline = time.time() + timeout
    while True:
        got = {}
        for name in hooks:
            f = cluster.base / f"runs-{name}.txt"
            rows = [ln.split() for ln in f.read_text().splitlines()] if f.exists() else []
            got[name] = [r[1:] for r in rows if r and r[0] == job]
        if all(len(got[n]) >= k for n, k in hooks.items()) or time.time() > deadline:
            return got
        time.sleep(0.2)


def _python_calls(cluster, job: str) -> list[str]:
    f = cluster.base / "calls" / "python.txt"
    return [ln.split()[1] for ln in f.read_text().splitlines() if ln.split()[0] == job] if f.exists() else []


def _verdict(engine, job: str, want: str | None = None, timeout: float = 30):
    deadline = time.time() + timeout
    row = None
    while time.time() < deadline:
        with engine.connect() as c:
            row = c.execute(text("SELECT outcome, culprit_nodes, root_kind, root_node, verdict_id "
                                 "FROM attribution.job_verdicts WHERE job_id = :j"), {"j": job}).first()
        if row is not None and (want is None or row[0] == want):
            return row
        time.sleep(0.3)
    return row


def test_failed_job_with_an_xid79_on_node2_ends_as_gpu_hardware_on_node2(cluster, db):
    task = cluster.base / "jobs" / "task.sh"
    task.parent.mkdir(exist_ok=True)
    task.write_text(
        "#!/bin/bash\n"
        'if [ "$SLURM_NODEID" = 1 ]; then\n'
        f'  echo "$(date -u "+[%a %b %e %H:%M:%S %Y]") {XID79}" >> {cluster.base}/kernel-node2.log\n'
        "fi\n"
        "sleep 1\n"
        'echo "$(hostname):4242:4243 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer '
        '10.0.0.2<1234> with error 12, opcode 0, len 0, vendor err 129 (Recv)"\n'
        'echo "[Rank $SLURM_PROCID] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, '
        'OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before '
        'timing out."\n'
        "exit 1\n")
    task.chmod(0o755)
    script = f"srun -l {task}\nexit 1"
    job = _job(cluster, script)
    assert cluster.wait_job(job) == "FAILED"
    runs = _wait_runs(cluster, job, {"epilog": 2, "epilog-ctld": 1})
    v = _verdict(db, job, "gpu_hardware")
    assert v is not None and v[0] == "gpu_hardware", v
    assert v[1] == ["node2"] and v[2] == "gpu_fallen_off_bus" and v[3] == "node2"
    with db.connect() as c:
        symptoms = c.execute(text(
            "SELECT e.kind, vs.explained_by FROM attribution.verdicts v "
            "CROSS JOIN unnest(v.symptom_event_ids, v.symptom_explained_by) AS vs(event_id, explained_by) "
            "JOIN attribution.events e ON e.id = vs.event_id WHERE v.id = :v"), {"v": v[4]}).all()
        sources = dict(c.execute(text("SELECT context_source, state FROM attribution.jobs WHERE job_id = :j"),
                                 {"j": job}).all())
    kinds = {k for k, _ in symptoms}
    assert {"nccl_ib_completion_error", "nccl_watchdog_timeout"} <= kinds
    assert all(by == "root_cause" for k, by in symptoms if k.startswith("nccl"))
    assert sources == {"controller": "FAILED"}
    assert all(rc == "0" for _, rc, _ in runs["epilog"] + runs["epilog-ctld"])


def test_successful_job_with_clean_logs_starts_no_python(cluster, db):
    job = _job(cluster, "srun -l true")
    assert cluster.wait_job(job) == "COMPLETED"
    runs = _wait_runs(cluster, job, {"epilog": 2, "epilog-ctld": 1, "prolog": 2})
    assert _python_calls(cluster, job) == []
    ms = sorted(int(r[2]) for r in runs["epilog"])
    print(f"\nclean-job node epilog run times (ms, incl. wrapper): {ms}")
    assert all(r[1] == "0" for r in runs["epilog"])
    with db.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.jobs WHERE job_id = :j"), {"j": job}).scalar() == 0


def _nccl_failure_with(cluster, name: str, on_node2: str) -> str:
    """A failed job whose tasks print only an NCCL completion error; node2's tasks first run `on_node2` (what
    the hardware does to the fake node during the job). Returns the job id."""
    task = cluster.base / "jobs" / f"task-{name}.sh"
    task.parent.mkdir(exist_ok=True)
    task.write_text(
        "#!/bin/bash\n"
        f'[ "$SLURM_NODEID" = 1 ] && {on_node2}\n'
        "sleep 1\n"
        'echo "$(hostname):4242:4243 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer '
        '10.0.0.2<1234> with error 12, opcode 0, len 0, vendor err 129 (Recv)"\n'
        "exit 1\n")
    task.chmod(0o755)
    return _job(cluster, f"srun -l {task}\nexit 1")


def test_counters_that_grew_on_node2_make_gpu_hardware_with_no_xid_anywhere(cluster, db):
    """The prolog and epilog snapshot the faked GPUs (8 per node) on both nodes; during the job node2's GPU 3
    counts two uncorrectable DRAM errors and a remapped row. No kernel line, only NCCL errors in the output.
    On 22.05 (no start time in the epilog's environment) the job's start is the prolog's stamp, which the
    epilog hands over with the hooks' state folder: a day's look-back start put the counter events a day before
    the job and the verdict was network."""
    fake = cluster.fakes["node2"]
    grown = fake.root / "ecc-grown.xml"
    grown.write_text(smi_document(8, {3: {"dram_uncorrectable": "2", "remapped_row_unc": "1"}}))
    job = _nccl_failure_with(cluster, "ecc", f"cp {grown} {fake.smi_file}")
    assert cluster.wait_job(job) == "FAILED"
    runs = _wait_runs(cluster, job, {"prolog": 2, "epilog": 2, "epilog-ctld": 1})
    v = _verdict(db, job, "gpu_hardware")
    assert v is not None and v[0] == "gpu_hardware", v
    assert v[1] == ["node2"] and v[2] == "gpu_ecc_counter" and v[3] == "node2"
    with db.connect() as c:
        latest = c.execute(text("SELECT node, remapped_rows_uncorrectable FROM attribution.gpu_counters_latest "
                                "WHERE gpu = '0000:61:00' ORDER BY node")).all()
    assert ("node2", 1.0) in latest
    for name in ("prolog", "epilog"):
        ms = sorted(int(r[2]) for r in runs[name])
        print(f"\n{name} run times with 8-GPU/8-HCA snapshots (ms, incl. wrapper): {ms}")
        assert all(r[1] == "0" for r in runs[name]) and max(ms) < BUDGET * 1000


def test_a_gpu_that_falls_off_the_bus_on_node2_is_the_root_cause_with_no_xid(cluster, db):
    """During the job node2's GPU 3 (0000:61:00.0) falls off the bus and the kernel removes it: the epilog's
    nvidia-smi lists seven GPUs and its PCI function leaves /sys/bus/pci/devices. No kernel line reaches the
    job's logs, the output has only an NCCL completion error: the vanished GPU is the root cause on node2."""
    fake = cluster.fakes["node2"]
    gone = fake.root / "gpu3-gone.xml"
    gone.write_text(smi_document(8, without=(3,)))
    link = fake.sys / "bus" / "pci" / "devices" / fake.gpu_bdf[3]
    fake.lost = {3}  # what reset() restores after the test
    job = _nccl_failure_with(cluster, "gone", f"cp {gone} {fake.smi_file} && rm -f {link}")
    assert cluster.wait_job(job) == "FAILED"
    runs = _wait_runs(cluster, job, {"prolog": 2, "epilog": 2, "epilog-ctld": 1})
    v = _verdict(db, job, "gpu_hardware")
    assert v is not None and v[0] == "gpu_hardware", v
    assert v[1] == ["node2"] and v[2] == "gpu_vanished" and v[3] == "node2"
    with db.connect() as c:
        rules = c.execute(text(
            "SELECT e.rule, e.gpu FROM attribution.job_events je JOIN attribution.events e ON e.id = je.event_id "
            "JOIN attribution.jobs j ON j.id = je.job_ref WHERE j.job_id = :j AND e.source = 'telemetry' "
            "ORDER BY e.rule"), {"j": job}).all()
    assert rules == [("counters.gpu_vanished", "0000:61:00"), ("counters.pcie_gpu_function_vanished", "0000:61:00")]
    assert all(r[1] == "0" for r in runs["epilog"] + runs["prolog"])


def test_a_link_down_counted_on_node1_during_a_clean_job_is_stored(cluster, db):
    """link_downed grows on node1's mlx5_3 during a job that still succeeds: the clean epilog sees the
    counter change and starts Python; the event is kept as a network cause on node1."""
    path = cluster.fakes["node1"].counter_path(3, "link_downed")
    job = _job(cluster, f"echo 1 > {path}\nsrun -l true")  # the fake nodes share this machine's filesystem
    assert cluster.wait_job(job) == "COMPLETED"
    _wait_runs(cluster, job, {"epilog": 2, "epilog-ctld": 1})
    assert _python_calls(cluster, job) == ["node1"]
    deadline = time.time() + 30
    rows = []
    while time.time() < deadline and not rows:
        with db.connect() as c:
            rows = c.execute(text("SELECT node, kind, role FROM attribution.fault_events "
                                  "WHERE source = 'telemetry'")).all()
        time.sleep(0.3)
    assert rows == [("node1", "ib_link_downed", "cause")]


def test_successful_job_with_a_fault_line_keeps_the_event(cluster, db):
    """A fault on a node during a job that still succeeded is kept for fleet trends; the job is not failed."""
    line = ("NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for "
            "remapping, reset gpu to activate.")
    script = f'echo "$(date -u "+[%a %b %e %H:%M:%S %Y]") {line}" >> {cluster.base}/kernel-node1.log\ntrue'
    job = _job(cluster, script, nodes=1)
    assert cluster.wait_job(job) == "COMPLETED"
    _wait_runs(cluster, job, {"epilog": 1, "epilog-ctld": 1})
    v = _verdict(db, job)
    assert v is not None and v[0] == "none"
    with db.connect() as c:
        assert c.execute(text("SELECT node, kind, jobs FROM attribution.fault_events")).all() == \
            [("node1", "gpu_row_remap_pending", 1)]
    assert _python_calls(cluster, job) == ["node1"]  # the node hook only: the controller saw a clean success


def test_service_and_database_away_during_a_failing_job_spool_then_a_flush_stores_once(cluster, db):
    """The nodes' service and the controller's database both refuse connections while a job fails: every hook
    still ends in time with status 0, each host spools its report; once they are back, each host's flush sends
    its report, the verdict is the job's, and a second flush sends nothing (no event or verdict doubled)."""
    from urllib.parse import urlsplit

    from sqlalchemy.engine import make_url

    svc_port = urlsplit(db.service.url).port
    db_url = make_url(db.db_url)
    to_service, to_db = Proxy(("127.0.0.1", svc_port)), Proxy((db_url.host or "127.0.0.1", db_url.port or 5432))
    try:
        write_hook_envs(cluster, url_via(db.service.url, to_service.port))
        (cluster.base / "config.yaml").write_text(f"home: {cluster.base}/home-ctld\ndatabase:\n  url: "
                                                  f"{url_via(db.db_url, to_db.port)}\n  connect_timeout: 2\n")
        script = (f'echo "$(date -u "+[%a %b %e %H:%M:%S %Y]") {XID79}" >> {cluster.base}/kernel-node1.log\n'
                  'echo "NCCL WARN something broke"\nexit 2')
        job = _job(cluster, script)
        assert cluster.wait_job(job) == "FAILED"
        runs = _wait_runs(cluster, job, {"epilog": 2, "epilog-ctld": 1})
        for name, rows in runs.items():
            for node, rc, ms in rows:
                assert rc == "0" and int(ms) < BUDGET * 1000, (name, node, rc, ms)
        spools = {"node1": cluster.base / "spool-node1", "node2": cluster.base / "spool-node2",
                  "ctld": cluster.base / "home-ctld" / "spool"}
        spooled = {n: list(d.glob("*.spool")) for n, d in spools.items()}
        assert all(len(v) == 1 for v in spooled.values()), spooled
        to_service.set("forward")
        to_db.set("forward")

        def flush(n):
            if n == "ctld":
                argv, env = [str(BIN), "spool", "flush"], {"ATTRIBUTION_CONFIG": str(cluster.base / "config.yaml")}
            else:
                argv, env = [str(NODE_BIN), "spool", "flush"], {"ATTRIBUTION_HOOK_ENV": str(cluster.etc /
                                                                                      f"hook-{n}.env")}
            return subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True,
                                  timeout=120)

        for n in spools:
            r = flush(n)
            assert r.returncode == 0, r.stdout + r.stderr
            assert ("delivered 1," if n == "ctld" else "sent 1,") in r.stdout, r.stdout
        v = _verdict(db, job, "gpu_hardware")
        assert v[0] == "gpu_hardware" and v[1] == ["node1"]
        with db.connect() as c:
            before = c.execute(text("SELECT (SELECT count(*) FROM attribution.events), "
                                    "(SELECT count(*) FROM attribution.verdicts)")).first()
        for n in spools:
            assert "nothing to" in flush(n).stdout
        with db.connect() as c:
            after = c.execute(text("SELECT (SELECT count(*) FROM attribution.events), "
                                   "(SELECT count(*) FROM attribution.verdicts)")).first()
        assert before == after
    finally:
        to_service.close()
        to_db.close()


def test_garbage_logs_and_output_never_fail_a_hook(cluster, db):
    with open(cluster.base / "kernel-node2.log", "ab") as f:
        f.write(os.urandom(200_000) + b"\0" * 1000 + b"NVRM: Xid (PCI:zz" + b"\xff" * 5000)
    script = "head -c 300000 /dev/urandom; printf 'Traceback (most recent call last):\\n\\xff\\xfe\\n'; exit 9"
    job = _job(cluster, script)
    assert cluster.wait_job(job) == "FAILED"
    runs = _wait_runs(cluster, job, {"epilog": 2, "epilog-ctld": 1})
    assert all(rc == "0" for rows in runs.values() for _, rc, _ in rows)
    assert _verdict(db, job) is not None


def test_cancelled_job_is_scheduler(cluster, db):
    # Cancel once the batch script runs: slurmctld says RUNNING at allocation, before the node starts the script,
    # and a job cancelled before that has no signal status to see (hooks/README.md, "Limits").
    started = cluster.base / "jobs" / "cancel-started"
    job = _job(cluster, f"touch {started}; sleep 300", nodes=1)
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert started.exists(), "the job's script never started"
    (cluster.base / f"{AWAIT_REPORT}{job}").touch()  # the batch host's report first (AWAIT_REPORT)
    cluster.run(["scancel", job])
    cluster.wait_job(job)
    _wait_runs(cluster, job, {"epilog-ctld": 1})
    v = _verdict(db, job, "scheduler")
    assert v is not None and v[0] == "scheduler"


def test_timed_out_job_is_scheduler_timeout(cluster, db):
    """A job killed at its time limit: the environment says 0:0, the controller tells TIMEOUT (22.05: the text's
    Reason=TimeLimit; 24.11: scontrol's JSON state). A minute: Slurm's time limits are whole minutes."""
    started = cluster.base / "jobs" / "timeout-started"
    job = _job(cluster, f"touch {started}; sleep 600", nodes=1)
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert started.exists(), "the job's script never started"
    r = cluster.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"])
    assert r.returncode == 0, r.stderr
    assert cluster.wait_job(job, timeout=180) == "TIMEOUT"
    _wait_runs(cluster, job, {"epilog-ctld": 1})
    v = _verdict(db, job, "scheduler")
    assert v is not None and v[0] == "scheduler", v
    with db.connect() as c:
        assert c.execute(text("SELECT state FROM attribution.jobs WHERE job_id = :j"), {"j": job}).scalar() == "TIMEOUT"


def test_no_node_is_drained(cluster):
    assert cluster.drained_nodes() == []
    log = (cluster.base / "hooks.log").read_text() if (cluster.base / "hooks.log").exists() else ""
    assert "Traceback" not in log


def test_drain_apply_drains_the_faulty_node_with_its_reason_and_resume_returns_it(cluster, db, ruleset):
    """`attribution drain` against the real slurmctld: the right node, the right Reason, and back again."""
    from datetime import datetime, timedelta, timezone

    from attribution.pipeline.ingest import ingest
    from attribution.pipeline.rulecheck import events_for_line
    from attribution.scope.bundle import parse_context

    now = datetime.now(timezone.utc).replace(microsecond=0)
    ctx = parse_context(f"cluster: attrtest\njob_id: '9001'\nnodes: node[1-2]\nstate: FAILED\nuser: alice\n"
                        f"start: {(now - timedelta(hours=1)).isoformat()}\nend: {now.isoformat()}\n")
    proto = events_for_line(ruleset, "kernel", XID79)[0]
    ev = type(proto)(**{**{k: getattr(proto, k) for k in proto.__slots__}, "node": "node2",
                        "time": now - timedelta(minutes=5), "location": "kernel.log:7"})
    ingest(ruleset, db, ctx, [ev], [], "bundle")
    env = dict(os.environ, ATTRIBUTION_CONFIG=str(cluster.base / "config.yaml"),
               ATTRIBUTION_HOME=str(cluster.base / "home-admin"), SLURM_CONF=str(cluster.conf_path))
    env.pop("ATTRIBUTION_DATABASE_URL", None)

    def cli(*args):
        return subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=120)

    sc = ["--scontrol", str(cluster.clients / "scontrol")]
    plan = cli("drain", "plan")
    assert "attrtest/node2" in plan.stdout and "attribution: xid79 gpu 0000:3b:00 job 9001" in plan.stdout
    r = cli("drain", "apply", *sc)
    assert r.returncode == 0, r.stderr
    assert "applied     attrtest/node2" in r.stdout
    info = cluster.run(["scontrol", "show", "node", "-o", "node2"]).stdout
    assert "DRAIN" in info and "Reason=attribution: xid79 gpu 0000:3b:00 job 9001" in info
    assert cluster.drained_nodes() == ["node2"]
    again = cli("drain", "apply", *sc)
    assert "skipped     attrtest/node2" in again.stdout and "already" in again.stdout
    back = cli("drain", "resume", "node2", *sc)
    assert back.returncode == 0, back.stderr
    deadline = time.time() + 20
    while cluster.drained_nodes() and time.time() < deadline:
        time.sleep(0.5)
    assert cluster.drained_nodes() == []
    assert "no node to drain" in cli("drain", "plan").stdout
    log = cli("drain", "log").stdout
    assert "resumed" in log and "applied" in log and "skipped" in log
