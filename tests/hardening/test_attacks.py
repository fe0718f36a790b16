"""The faults found by attacking the product (issue 18), one regression test per finding, named after it.

The service's findings (M5, M6, L1, L6, L9) are in tests/hardening/test_service.py, the writer's grants (M7) in
tests/hardening/test_privileges.py, the trust model (H1-H3, L7) in tests/test_trust.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from attribution.node import spool
from attribution.scope.bundle import parse_context

from tests.conftest import ROOT

UTC = timezone.utc
NOW = datetime.now(UTC).replace(microsecond=0)
HOOKS = ROOT / "hooks"


def _ctx(cluster="hard", job_id="77", nodes=("n1",)):
    return parse_context(json.dumps({"cluster": cluster, "job_id": job_id, "nodes": list(nodes), "state": "FAILED",
                                     "start": (NOW - timedelta(hours=1)).isoformat(), "end": NOW.isoformat()}))


# -- M1: a spool file with non-UTF-8 fields -----------------------------------------------------------------------


def _doc(job_id: str, cluster: str = "hard", origin: str = "/var/log/kern.log") -> dict:
    """A node's observation document of one failed job with one kernel line kept."""
    return {"format": "attribution.observations/1", "reporter": {"role": "node", "name": "n1"}, "cluster": cluster,
            "slurm": {"SLURM_JOB_ID": job_id, "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n1",
                      "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_START_TIME": str(int(NOW.timestamp()) - 3600),
                      "SLURM_JOB_END_TIME": str(int(NOW.timestamp()))},
            "times": {"now": NOW.timestamp()},
            "logs": [{"source": "kernel", "origin": origin, "status": "ok", "lines": 1, "bytes": 60,
                      "blocks": [[1, ["usb 1-1: USB disconnect, device number 2"]]]}]}


def _m1_spool(d: Path) -> None:
    bad_path = _doc("2", origin="/var/log/kern-\udcff\udcfe.log")  # a path that is not UTF-8
    bad_node = _doc("3", cluster="h\udce9rd")
    for p in (bad_path, bad_node, _doc("1"), _doc("4")):
        spool.write(d, p)


def _m1_flushed(d: Path, res) -> None:
    assert res.error is None, res.error
    assert res.replayed == 2 and len(res.bad) == 2 and spool.pending(d) == []
    assert all("not UTF-8" in b for b in res.bad)
    assert len(list((d / "bad").glob("*.spool"))) == 2


def test_m1_spool_file_with_non_utf8_fields_goes_to_bad_and_the_flush_goes_on(ruleset, store, tmp_path):
    """The controller's spool, delivered into the database through the one intake."""
    from attribution.pipeline.intake import decode_document, ingest_document

    d = tmp_path / "spool"
    _m1_spool(d)
    _m1_flushed(d, spool.flush(d, lambda data: ingest_document(ruleset, store, decode_document(data))))
    with store.connect() as c:
        assert sorted(c.execute(text("SELECT job_id FROM attribution.jobs")).scalars()) == ["1", "4"]


def test_m1_the_same_when_the_node_flushes_to_the_service(tmp_path):
    """The node collector's flush: the spool itself refuses such a document, so it never reaches the client
    (whose JSON could not carry it either)."""
    class Client:
        def __init__(self):
            self.jobs = []

        def post(self, data, deadline=None):
            json.dumps(data, ensure_ascii=False).encode("utf-8")  # what a UTF-8 wire needs
            self.jobs.append(data["slurm"]["SLURM_JOB_ID"])

    d = tmp_path / "spool"
    _m1_spool(d)
    client = Client()
    _m1_flushed(d, spool.flush(d, client.post))
    assert client.jobs == ["1", "4"]


# -- M3 / L5: the hooks on untrusted files and environment -------------------------------------------------------


def _hook_env(tmp_path: Path, **extra) -> dict[str, str]:
    (tmp_path / "state").mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "ATTRIBUTION_HOOK_ENV": "/dev/null", "ATTRIBUTION_LOG": str(tmp_path / "hooks.log"),
           "ATTRIBUTION_STATE_DIR": str(tmp_path / "state"), "ATTRIBUTION_FM_LOG": str(tmp_path / "no-fm.log"),
           "ATTRIBUTION_BIN": str(tmp_path / "no-attribution"), "ATTRIBUTION_BUDGET": "5",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_EXIT_CODE": "0"}
    env.update(extra)
    return env


def test_m3_epilog_slurmctld_does_not_block_on_a_fifo_named_as_job_output(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho 'JobId=4242 JobState=COMPLETED ExitCode=0:0 StdOut={fifo} "
                        f"StdErr=/dev/zero'\n")
    scontrol.chmod(0o755)
    env = _hook_env(tmp_path, ATTRIBUTION_SCONTROL=str(scontrol))
    # a FIFO nobody writes to blocks `tail` for ever: the hook must not open it (bounded by the test's timeout)
    r = subprocess.run([str(HOOKS / "epilog-slurmctld")], env=env, capture_output=True, timeout=60)
    assert r.returncode == 0


@pytest.mark.parametrize("var", ["SLURM_JOB_START_TIME", "stamp_start", "stamp_offset"])
@pytest.mark.parametrize("source", ["journald", "dmesg", "file"])
def test_l5_no_shell_arithmetic_on_untrusted_environment_in_hooks(tmp_path, var, source):
    pwned = tmp_path / "PWNED"
    evil = f"a[$(touch {pwned})]"
    kern = tmp_path / "kern.log"
    kern.write_text("nothing to see\n")
    extra = {"ATTRIBUTION_KERNEL_SOURCE": source, "ATTRIBUTION_KERNEL_FILE": str(kern)}
    if var == "SLURM_JOB_START_TIME":
        extra[var] = evil
    env = _hook_env(tmp_path, **extra)
    if var.startswith("stamp"):
        key = "start" if var == "stamp_start" else "kernel_offset"
        (tmp_path / "state" / "job-4242.start").write_text(f"{key}={evil}\n")
    r = subprocess.run([str(HOOKS / "epilog")], env=env, capture_output=True, timeout=60)
    assert r.returncode == 0
    assert not pwned.exists(), "a command in the environment ran"


# -- M4: two `drain apply` at once -------------------------------------------------------------------------------


def _racing_scontrol(tmp_path: Path, nodes: list[str]) -> Path:
    """The fake scontrol of tests/test_drain.py, plus a barrier: the first `update` waits (at most 10 s) until two
    runs have listed the nodes. Without a lock both runs list them before either drains (the race, for sure);
    with the lock the second run lists them only after the first has ended, and the wait times out once."""
    from tests.drain.test_policy import _fake_scontrol

    fake = _fake_scontrol(tmp_path, nodes)
    body = fake.read_text()
    listed, waited = tmp_path / "listed.txt", tmp_path / "waited"
    body = body.replace('if args[:3] == ["show", "node", "-o"]:\n',
                        f'if args[:3] == ["show", "node", "-o"]:\n    open({str(listed)!r}, "a").write("x")\n')
    body = body.replace('elif args[0] == "update":\n', f'''elif args[0] == "update":
    import os, time
    t_end = time.monotonic() + 10
    while not os.path.exists({str(waited)!r}) and time.monotonic() < t_end:
        if os.path.exists({str(listed)!r}) and len(open({str(listed)!r}).read()) >= 2:
            break
        time.sleep(0.05)
    open({str(waited)!r}, "a").close()
''')
    fake.write_text(body)
    return fake


# two drain apply processes racing over 500 nodes through a fake scontrol: over 10 s on two busy cores
@pytest.mark.slow
def test_m4_drain_apply_runs_are_serialized_and_keep_the_hourly_cap(ruleset, store, tmp_path):
    from tests.drain.test_policy import _cli, _events, _ingest_node_events

    xid79 = _events(ruleset, "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                             "the bus.")
    nodes = [f"m{i:03d}" for i in range(500)]
    _ingest_node_events(ruleset, store, "misfire", "1", nodes[:40], {n: xid79 for n in nodes[:40]},
                        NOW - timedelta(hours=1))
    fake = _racing_scontrol(tmp_path, nodes)
    results: list = [None, None]

    def run(i):
        results[i] = _cli(store, tmp_path, "drain", "apply", "--cluster", "misfire", "--scontrol", str(fake))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    drained = (tmp_path / "drained.txt").read_text().splitlines()
    assert len(drained) == 10  # max_drains_per_hour, whatever the number of runs
    with store.connect() as c:
        assert c.execute(text("SELECT count(*) FROM attribution.drain_actions WHERE decision = 'applied'")
                         ).scalar() == 10


def test_m4_the_audit_row_is_written_before_the_scontrol_call(ruleset, store, tmp_path):
    """A run killed during a scontrol call still counts that drain against the cap."""
    from tests.drain.test_policy import _cli, _events, _fake_scontrol, _ingest_node_events

    xid79 = _events(ruleset, "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off "
                             "the bus.")
    nodes = [f"m{i:03d}" for i in range(100)]
    _ingest_node_events(ruleset, store, "misfire", "1", nodes[:3], {n: xid79 for n in nodes[:3]},
                        NOW - timedelta(hours=1))
    fake = _fake_scontrol(tmp_path, nodes)
    url = store.url.render_as_string(hide_password=False)
    seen = tmp_path / "audit_at_call.txt"
    body = fake.read_text().replace('elif args[0] == "update":\n', f'''elif args[0] == "update":
    import psycopg
    with psycopg.connect({url.replace("postgresql+psycopg://", "postgresql://")!r}) as pc:
        n = pc.execute("SELECT count(*) FROM attribution.drain_actions WHERE decision = 'applied'").fetchone()[0]
    open({str(seen)!r}, "a").write(str(n) + "\\n")
''')
    fake.write_text(body)
    r = _cli(store, tmp_path, "drain", "apply", "--cluster", "misfire", "--scontrol", str(fake))
    assert r.returncode == 0, r.stderr
    assert seen.read_text().split() == ["1", "2", "3"]  # the row of each drain exists when scontrol runs


def test_m4_the_apply_lock_leaves_the_pooled_connection_its_own_timeouts(pg_url):
    """The lock waits up to 10 minutes for the run before; the connection it came from goes back to the pool with
    the timeouts the configuration gave it."""
    from sqlalchemy import create_engine

    from attribution.store.drain import apply_lock

    engine = create_engine(pg_url, pool_size=1, max_overflow=0,
                           connect_args={"options": "-c statement_timeout=12345 -c lock_timeout=2345"})
    try:
        with apply_lock(engine, "pool"):
            pass
        with engine.connect() as c:
            assert c.execute(text("SHOW statement_timeout")).scalar() == "12345ms"
            assert c.execute(text("SHOW lock_timeout")).scalar() == "2345ms"
    finally:
        engine.dispose()


# -- L2 / L3: the CLI on hostile bundles --------------------------------------------------------------------------


def _cli_bundle(tmp_path: Path, context: dict | None = None) -> Path:
    b = tmp_path / "b"
    (b / "job").mkdir(parents=True)
    (b / "nodes" / "n1").mkdir(parents=True)
    ctx = {"cluster": "hard", "job_id": "1", "nodes": ["n1"], "state": "FAILED",
           "start": "2026-10-01T12:00:00Z", "end": "2026-10-01T13:00:00Z"}
    ctx.update(context or {})
    (b / "context.yaml").write_text(json.dumps(ctx))
    (b / "nodes" / "n1" / "kernel.log").write_text("")
    (b / "job" / "out.txt").write_text("Traceback (most recent call last):\nKeyError: 'x'\n")
    return b


def _diagnose(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attribution.cli", "diagnose", *map(str, args)],
                          capture_output=True, timeout=timeout)


def _one_line_exit_2(r: subprocess.CompletedProcess, *words: str) -> None:
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("field,value", [("start", "0001-01-01T00:00:00Z"), ("end", "9999-12-31T23:59:59Z"),
                                         ("start", "0001-01-01T00:00:00"), ("boot_time", {"n1": "9999-12-31"})])
def test_l2_years_0001_and_9999_in_context_exit_2_with_one_line(tmp_path, field, value):
    ctx = {field: value}
    if field == "start":
        ctx["timezone"] = "+09:00"  # 0001-01-01 local is before datetime's first UTC instant
    _one_line_exit_2(_diagnose(_cli_bundle(tmp_path, ctx)), "context.yaml")


def test_l2_non_utf8_file_name_in_a_bundle_gives_a_verdict_not_a_traceback(tmp_path):
    b = _cli_bundle(tmp_path)
    os.rename(b / "job" / "out.txt", os.path.join(os.fsencode(b / "job"), b"slurm-\xff\xfe.out"))
    for args in ([b], [b, "--json"]):
        r = _diagnose(*args)
        assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
        out = r.stdout.decode("utf-8")  # valid UTF-8: the name is shown with U+FFFD
        if "--json" in args:
            out = json.dumps(json.loads(out), ensure_ascii=False)
        assert "slurm-\ufffd\ufffd.out" in out


def _special(kind: str, path: Path) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(kind, path)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_l3_context_yaml_that_is_a_special_file_exits_2_without_hanging(tmp_path, kind):
    b = _cli_bundle(tmp_path)
    (b / "context.yaml").unlink()
    _special(kind, b / "context.yaml")
    _one_line_exit_2(_diagnose(b), "context.yaml", "not a regular file")


@pytest.mark.parametrize("name", ["kernel.log", "fabricmanager.log", "syslog.log"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/urandom"])
def test_l3_node_log_that_is_a_special_file_is_a_coverage_gap(tmp_path, name, kind):
    b = _cli_bundle(tmp_path)
    _special(kind, b / "nodes" / "n1" / name)
    r = _diagnose(b, "--json")
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
    cov = {c.get("file"): c for c in json.loads(r.stdout)["coverage"]}
    if name == "syslog.log":  # other node logs are read only when they are regular files
        assert f"nodes/n1/{name}" not in cov
        return
    gap = cov[f"nodes/n1/{name}"]
    assert gap["status"] == "error" and "not a regular file" in gap["reason"]


# -- L4: the controller hook on StdOut=/dev/zero and non-UTF-8 scontrol output ------------------------------------


def test_l4_stdout_dev_zero_and_non_utf8_scontrol_output_keep_the_report(tmp_path, pg_url):
    """The controller's `attribution epilog` (the full command: the node collector does not do the controller's
    part)."""
    entry = "attribution"
    from sqlalchemy import create_engine

    info = tmp_path / "scontrol.txt"
    info.write_bytes(b"JobId=9130 JobName=tr\xffin UserId=mallory(1000) JobState=FAILED Reason=NonZeroExitCode "
                     b"ExitCode=1:0 NodeList=n1 StartTime=2026-10-01T12:00:00 EndTime=2026-10-01T13:00:00 "
                     b"StdOut=/dev/zero StdErr=/dev/urandom Comment=\xfe\xfd\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"database:\n  url: {pg_url}\n  connect_timeout: 2\n")
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "9130", "SLURM_JOB_EXIT_CODE": "256",
           "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_CLUSTER_NAME": "hard", "SLURM_JOB_NODELIST": "n1",
           "SLURM_JOB_USER": "mallory", "ATTRIBUTION_CONFIG": str(config), "ATTRIBUTION_HOME": str(tmp_path / "h")}
    bin_ = Path(sys.executable).parent / entry
    r = subprocess.run([str(bin_), "epilog", "--budget", "20", "--scontrol-output", str(info)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "error" not in r.stderr, r.stdout + r.stderr
    engine = create_engine(pg_url)
    try:
        with engine.connect() as c:
            gaps = dict(c.execute(text(
                "SELECT co.file_key, co.reason FROM attribution.coverage co JOIN attribution.jobs j "
                "ON j.id = co.job_ref WHERE j.job_id = '9130' AND co.source = 'job'")).all())
    finally:
        engine.dispose()
    assert set(gaps) == {"/dev/zero", "/dev/urandom"}
    assert all("not a regular file" in reason for reason in gaps.values())


def test_l4_a_huge_regular_job_output_is_read_only_at_its_end(tmp_path, pg_url):
    """The job's owner sets the size of its output: a sparse 64 GiB file would take the controller hook past any
    budget. The hook reads its last epilog.job_output_bytes (here 1 MiB) and finds the error printed at the end."""
    from sqlalchemy import create_engine

    out = tmp_path / "slurm-9131.out"
    with open(out, "wb") as f:
        f.truncate(64 << 30)  # a hole: no disk used
        f.seek(0, os.SEEK_END)
        f.write(b"\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    info = tmp_path / "scontrol.txt"
    info.write_text(f"JobId=9131 JobName=train UserId=mallory(1000) JobState=FAILED Reason=NonZeroExitCode "
                    f"ExitCode=1:0 NodeList=n1 StartTime=2026-10-01T12:00:00 EndTime=2026-10-01T13:00:00 "
                    f"StdOut={out} StdErr={out}\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"database:\n  url: {pg_url}\n  connect_timeout: 2\nepilog:\n  job_output_bytes: 1048576\n")
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "9131", "SLURM_JOB_EXIT_CODE": "256",
           "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_CLUSTER_NAME": "hard", "SLURM_JOB_NODELIST": "n1",
           "SLURM_JOB_USER": "mallory", "ATTRIBUTION_CONFIG": str(config), "ATTRIBUTION_HOME": str(tmp_path / "h")}
    r = subprocess.run([str(Path(sys.executable).parent / "attribution"), "epilog", "--budget", "20",
                        "--scontrol-output", str(info)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "stored" in r.stdout and "error" not in r.stderr, r.stdout + r.stderr
    engine = create_engine(pg_url)
    try:
        with engine.connect() as c:
            notes = c.execute(text(
                "SELECT co.notes FROM attribution.coverage co JOIN attribution.jobs j ON j.id = co.job_ref "
                "WHERE j.job_id = '9131' AND co.source = 'job'")).scalar_one()
            kinds = set(c.execute(text(
                "SELECT e.kind FROM attribution.events e JOIN attribution.job_events je ON je.event_id = e.id "
                "JOIN attribution.jobs j ON j.id = je.job_ref WHERE j.job_id = '9131' AND e.source = 'job'"
            )).scalars())
    finally:
        engine.dispose()
    last = len(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")  # the line after the cut
    assert f"read the last {last} of {out.stat().st_size} bytes (line numbers count from there)" in notes, notes
    assert kinds, "the error at the end of the output was not read"


@pytest.mark.parametrize("value", [0, -1, "16M", True])
def test_l4_the_job_output_bound_is_checked_where_it_is_read(value):
    from attribution.config import parse_settings
    from attribution.errors import ConfigError

    with pytest.raises(ConfigError, match="epilog.job_output_bytes"):
        parse_settings({"epilog": {"job_output_bytes": value}}, "config.yaml")
