"""node.agent, the node collector, run as the hooks run it (a fresh process of the installed `attribution-node`)
against a real `attribution serve`: what it stores, spools and sends once, what it imports (the standard library
only), and what a token bound to a cluster and its nodes lets it report."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from sqlalchemy import text

from attribution.node import spool
from tests.conftest import NODE_TOKEN  # report, cluster=hard nodes=n[1-4]
from tests.harness.hooknode import NODE_BIN, Node


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def node(tmp_path, node_service, request):
    made = []

    def make(job_id: str, token: str | None = None, url: str | None = None, **kw) -> Node:
        n = Node(tmp_path / f"node-{len(made)}", url or node_service.url, token or node_service.tokens["report"],
                 job_id, **kw)
        made.append(n)
        return n
    yield make
    for n in made:
        n.close()


def verdict(engine, cluster: str, job_id: str):
    with engine.connect() as c:
        return c.execute(text("SELECT outcome, root_kind, root_node, root_gpu FROM attribution.job_verdicts "
                              "WHERE cluster = :c AND job_id = :j"), {"c": cluster, "j": job_id}).first()


def test_a_failed_job_is_reported_to_the_service_and_stored(node, node_engine):
    n = node("5001")
    _, r = n.epilog()
    assert r.returncode == 0 and "node job 5001" in r.stdout and "stored" in r.stdout, r.stdout + r.stderr
    assert verdict(node_engine, "hard", "5001") == ("gpu_hardware", "gpu_fallen_off_bus", "n1", "0000:3b:00")
    assert n.spooled() == []


def test_the_service_away_spools_within_the_budget_and_a_flush_sends_it_once(node, node_service, node_engine):
    n = node("5002", url=f"http://127.0.0.1:{closed_port()}")
    seconds, r = n.epilog(budget=6)
    assert r.returncode == 0 and "spooled to" in r.stdout and "error:" in r.stdout, r.stdout + r.stderr
    assert seconds < 6 and len(n.spooled()) == 1
    assert verdict(node_engine, "hard", "5002") is None
    n.write_hook_env(url=node_service.url)
    r = n.flush()
    assert r.returncode == 0 and "sent 1, left 0, bad 0" in r.stdout, r.stdout + r.stderr
    assert verdict(node_engine, "hard", "5002")[0] == "gpu_hardware"
    r = n.flush()
    assert "nothing to send" in r.stdout and n.spooled() == []


def test_a_later_run_sends_what_an_earlier_one_spooled(node, node_service, node_engine):
    n = node("5003", url=f"http://127.0.0.1:{closed_port()}")
    n.epilog(budget=5)
    assert len(n.spooled()) == 1
    n.write_hook_env(url=node_service.url)
    n.job_id = "5004"
    _, r = n.epilog()
    assert "stored" in r.stdout and "replayed 1 spooled" in r.stdout, r.stdout
    assert verdict(node_engine, "hard", "5003")[0] == verdict(node_engine, "hard", "5004")[0] == "gpu_hardware"


def test_a_clean_job_with_nothing_worth_a_look_reports_nothing(node, node_engine):
    n = node("5005")
    n.kernel.write_text("[Mon Nov 30 08:00:00 2026] Linux version 6.8.0 (boot)\n")
    env = dict(n.env(), SLURM_JOB_EXIT_CODE="0")
    r = subprocess.run([str(NODE_BIN), "epilog", "--kernel-file", str(n.kernel), "--fabricmanager-log",
                        str(n.base / "no-fm.log")], env=env, capture_output=True, text=True, timeout=60)
    assert "skipped: clean job, nothing to report" in r.stdout, r.stdout + r.stderr
    assert n.spooled() == [] and verdict(node_engine, "hard", "5005") is None


@pytest.mark.parametrize("name, cluster, why", [
    ("n2", "hard", None),
    ("n9", "hard", "may not speak for node(s) n9"),
    ("n1", "other", "cluster 'hard' only"),
])
def test_a_node_token_speaks_only_for_its_cluster_and_nodes(node, node_engine, name, cluster, why):
    """`report TOKEN ... cluster=hard nodes=n[1-4]`: a report from another node or of another cluster is refused
    with 403 (set aside on the node: it will never be taken) and stores nothing."""
    n = node(f"51{name[-1]}{len(cluster)}", token=NODE_TOKEN, name=name, cluster=cluster)
    _, r = n.epilog()
    if why is None:
        assert "stored" in r.stdout, r.stdout
        assert verdict(node_engine, cluster, n.job_id)[0] == "gpu_hardware"
        return
    assert "set aside" in r.stdout and "HTTP 403" in r.stdout and why in r.stdout, r.stdout
    assert verdict(node_engine, cluster, n.job_id) is None
    assert n.spooled() == [] and len(list((n.spool_dir / "bad").glob("*.spool"))) == 1


def test_a_report_naming_nodes_outside_the_token_is_refused(node, node_engine):
    n = node("5201", token=NODE_TOKEN)
    env = dict(n.env(), SLURM_NODELIST="n1,beta7")
    r = subprocess.run([str(NODE_BIN), "epilog", "--kernel-file", str(n.kernel), "--fabricmanager-log",
                        str(n.base / "no-fm.log")], env=env, capture_output=True, text=True, timeout=60)
    assert "HTTP 403" in r.stdout and "beta7" in r.stdout, r.stdout
    assert verdict(node_engine, "hard", "5201") is None


PROBE = """
import json, sys
before = set(sys.modules)
from attribution.node.agent import main
main(sys.argv[1:])
print("MODULES " + json.dumps(sorted(set(sys.modules) - before)))
"""


def test_a_hook_run_imports_the_standard_library_only(node):
    """What the node runs on every failed job: nothing of attribution outside attribution.node, no third-party
    module, and on the hooks' argv neither argparse nor gettext (the fast argv path)."""
    n = node("5301", url=f"http://127.0.0.1:{closed_port()}")
    argv = ["epilog", "--budget", "5", "--kernel-file", str(n.kernel), "--fabricmanager-log",
            str(n.base / "no-fm.log")]
    r = subprocess.run([sys.executable, "-I", "-c", PROBE, *argv], env=n.env(), capture_output=True, text=True,
                       timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    assert "spooled to" in r.stdout, r.stdout
    mods = json.loads(r.stdout.rpartition("MODULES ")[2])
    ours = [m for m in mods if m.split(".")[0] == "attribution"]
    assert all(m == "attribution" or m.startswith("attribution.node") for m in ours), ours
    foreign = [m for m in mods if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "attribution"]
    assert foreign == []
    assert "argparse" not in mods and "gettext" not in mods
    # what a run need not pay for: annotations' typing, the idna codec for an ASCII host, a grep process for a
    # small log (bench row 2 measured each: 14, ~4 and ~8 ms)
    assert {"typing", "encodings.idna", "subprocess"} & set(mods) == set(), mods


def test_the_hooks_argv_is_read_as_argparse_reads_it_and_anything_else_goes_to_argparse():
    from attribution.node.agent import _epilog_args, _parser

    hooks = ["epilog", "--budget", "20", "--started", "1765000000.25", "--kernel-source", "file", "--state-dir",
             "/s", "--telemetry", "/t", "--kernel-file", "/k", "--fabricmanager-log", "/f", "--filter", "/p"]
    got = _epilog_args(hooks)
    assert (got["budget"], got["started"], got["kernel_source"], got["filter_file"]) == (20.0, 1765000000.25, "file",
                                                                                       "/p")
    parsed = vars(_parser().parse_args(hooks))
    assert {k: parsed[k] for k in got} == got
    for other in (["epilog", "--bud", "3"], ["epilog", "--budget=3"], ["epilog", "--budget"], ["spool", "flush"],
                  ["epilog", "--kernel-source", "syslog"], ["epilog", "--budget", "soon"], ["epilog", "-h"],
                  ["--version"], ["epilog", "--kernel-file", "-x"]):
        assert _epilog_args(other) is None, other


def test_in_the_controllers_context_the_collector_points_at_the_full_command(node):
    n = node("5401")
    env = {k: v for k, v in n.env().items() if k != "SLURMD_NODENAME"}
    env["SLURM_SCRIPT_CONTEXT"] = "epilog_slurmctld"
    r = subprocess.run([str(NODE_BIN), "epilog"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "controller's epilog" in r.stdout and n.spooled() == []


def test_the_document_holds_the_filtered_lines_with_their_numbers(node):
    """What travels: the Xid line with its neighbours, numbered as in the log; the rest of the log stays home."""
    n = node("5501", url=f"http://127.0.0.1:{closed_port()}")
    quiet = [f"[Mon Nov 30 08:00:{i:02d} 2026] usb 1-1: quiet line {i}" for i in range(40)]
    fault = n.kernel.read_text().strip()
    n.kernel.write_text("\n".join(quiet[:20] + [fault] + quiet[20:]) + "\n")
    n.epilog(budget=5)
    [f] = n.spooled()
    doc = spool.decode(f.read_bytes())
    [kernel] = [log for log in doc["logs"] if log["source"] == "kernel"]
    assert kernel["lines"] == 41 and kernel["status"] == "ok"
    [(first, lines)] = kernel["blocks"]
    assert first == 5 and lines[16] == fault and len(lines) == 33  # line 21, 16 lines either side
    assert doc["reporter"] == {"role": "node", "name": "n1", "agent": doc["reporter"]["agent"],
                               "filter": doc["reporter"]["filter"]}
    assert doc["slurm"]["SLURM_JOB_ID"] == "5501" and "SLURM_JOB_STDOUT" not in doc["slurm"]
