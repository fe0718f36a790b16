"""The node agent (node/agent.py) as the hooks run it: a fresh process, what it imports, its caches.

Each run here is a new interpreter started the way hooks/lib.sh starts `attribution epilog`, on a failed job with
an Xid 79 in its kernel log, its report target (the database or the service) away, so the report is spooled.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from attribution.node import spool
from attribution.node.settings import node_settings
from attribution.rulepack import cache
from attribution.rulepack.load import load_rules
from tests.conftest import INCIDENTS, ROOT, bundles

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
#: what a hook run must never import (the heavy central side and the parsers the caches replace)
FORBIDDEN = ("attribution.cli", "click", "httpx", "yaml", "jsonschema", "pydantic", "fastapi", "starlette",
             "uvicorn", "alembic", "altair", "vl_convert", "sqlalchemy.orm")
#: what the service path no longer imports (a hand-read argv instead of argparse and gettext; named time zones,
#: importlib.resources and zipfile only where used; the XML parser only where nvidia-smi wrote its XML, the job
#: output readers only on the controller; no dataclasses (attribution.frozen); subprocess, tempfile and shutil only
#: where journalctl runs; no idna codec for an ASCII host name): #16 target 2
NOT_ON_THE_SERVICE_PATH = ("argparse", "gettext", "zoneinfo", "zipfile", "importlib.resources", "xml.etree",
                           "attribution.collect.joboutput", "attribution.collect.joblog", "dataclasses", "inspect",
                           "subprocess", "tempfile", "shutil", "encodings.idna")
PROBE = """
import json, sys
from attribution.node.agent import main
main(sys.argv[1:])
print("MODULES " + json.dumps(sorted(sys.modules)))
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node(tmp_path: Path, target: str) -> tuple[dict, list[str]]:
    """A node's environment with a failed job, and the agent's argv; `target` is "database" (the ingest on the
    node) or "service"."""
    port = closed_port()
    cfg = tmp_path / "config.yaml"
    if target == "service":
        token = tmp_path / "token"
        token.write_text("t0ken")
        token.chmod(0o600)
        cfg.write_text(f"service_url: http://127.0.0.1:{port}\nservice_token_file: {token}\n"
                       "service:\n  client_timeout_seconds: 1\n")
    else:
        cfg.write_text(f"database:\n  url: postgresql://u@127.0.0.1:{port}/x\n  connect_timeout: 1\n")
    kern = tmp_path / "kern.log"
    kern.write_text(f"[{datetime.now(timezone.utc).strftime('%a %b %e %H:%M:%S %Y')}] {XID79}\n")
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "4242", "SLURMD_NODENAME": "n1", "SLURM_NODELIST": "n1",
           "SLURM_JOB_EXIT_CODE": "256", "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURM_CLUSTER_NAME": "c1",
           "ATTRIBUTION_CONFIG": str(cfg), "ATTRIBUTION_HOME": str(tmp_path / "home")}
    argv = ["epilog", "--budget", "4", "--kernel-file", str(kern), "--fabricmanager-log", str(tmp_path / "no-fm")]
    return env, argv


def run_probe(env: dict, argv: list[str]) -> tuple[str, set[str]]:
    r = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120,
                       cwd="/")
    assert r.returncode == 0, r.stderr
    line, _, mods = r.stdout.rpartition("MODULES ")
    return line + r.stderr, set(json.loads(mods))


def forbidden_in(modules: set[str]) -> list[str]:
    return sorted(f for f in FORBIDDEN if any(m == f or m.startswith(f + ".") for m in modules))


@pytest.mark.parametrize("target", ["service", "database"])
def test_a_hook_run_imports_none_of_the_central_side_and_spools(tmp_path, target):
    env, argv = node(tmp_path, target)
    first, _ = run_probe(env, argv)  # fills the caches (loads the YAML pack and the configuration)
    assert "spooled to" in first, first
    out, modules = run_probe(env, argv)
    assert "node job 4242; 1 event(s)" in out and "spooled to" in out, out
    assert forbidden_in(modules) == []
    assert ("sqlalchemy" in modules) == ("psycopg" in modules) == (target == "database")
    if target == "service":
        assert sorted(m for m in NOT_ON_THE_SERVICE_PATH if m in modules) == []
        assert "ssl" not in modules  # a plain http:// service, a server that never answered
    files = spool.pending(tmp_path / "home" / "spool")
    assert len(files) == 2
    payload = spool.decode(files[-1].read_bytes())
    assert payload["context"]["job_id"] == "4242"
    assert [e["kind"] for e in payload["events"]] == ["gpu_fallen_off_bus"]


def test_the_hooks_argv_is_read_as_argparse_reads_it_and_anything_else_goes_to_argparse(monkeypatch):
    from attribution.node.agent import _epilog_args, _parser

    monkeypatch.delenv("ATTRIBUTION_RULES", raising=False)
    hooks = ["--config", "/etc/c.yaml", "epilog", "--budget", "20", "--started", "1765000000.25", "--kernel-source",
             "file", "--state-dir", "/s", "--telemetry", "/t", "--kernel-file", "/k", "--fabricmanager-log", "/f"]
    got = _epilog_args(hooks)
    assert (got.budget, got.started, got.kernel_source, got.config) == (20.0, 1765000000.25, "file", "/etc/c.yaml")
    assert vars(got) == vars(_parser().parse_args(hooks))
    assert vars(_epilog_args(["epilog"])) == vars(_parser().parse_args(["epilog"]))
    for other in (["epilog", "--bud", "3"], ["epilog", "--budget=3"], ["epilog", "--budget"], ["spool", "flush"],
                  ["epilog", "--kernel-source", "syslog"], ["epilog", "--budget", "soon"], ["epilog", "-h"],
                  ["--version"], ["epilog", "--kernel-file", "-x"]):
        assert _epilog_args(other) is None, other


def test_the_cached_pack_gives_the_same_verdicts_as_the_loaded_one(tmp_path):
    from attribution.pipeline.diagnose import diagnose_bundle
    from attribution.reports.render import verdict_to_dict

    loaded = load_rules(ROOT / "rules")
    assert cache.cached_rules(ROOT / "rules", tmp_path / "c") is not None  # a miss: loads and writes
    [entry] = (tmp_path / "c").glob("rules-*.pickle")
    cached = cache.cached_rules(ROOT / "rules", tmp_path / "c")
    assert isinstance(cached.prefilter("kernel")._rx, cache.LazyRegex)  # read from the cache, not compiled
    assert cached.version == loaded.version and len(cached.rules) == len(loaded.rules)
    cases = bundles(INCIDENTS)
    assert len(cases) >= 10
    for b in cases:
        assert verdict_to_dict(diagnose_bundle(cached, b).verdict) == verdict_to_dict(
            diagnose_bundle(loaded, b).verdict), b.name
    assert entry.exists()


def test_a_changed_pack_gets_a_new_entry_and_a_writable_one_is_not_trusted(tmp_path):
    pack = tmp_path / "rules"
    import shutil

    shutil.copytree(ROOT / "rules", pack)
    c = tmp_path / "c"
    cache.cached_rules(pack, c)
    [first] = c.glob("rules-*.pickle")
    kinds = pack / "kinds.yaml"
    kinds.write_text(kinds.read_text() + "\n# a comment changes the digest\n")
    rs = cache.cached_rules(pack, c)
    [second] = c.glob("rules-*.pickle")
    assert second != first and rs.root == str(pack)
    # an entry others may write is never unpickled: replace it with a pickle that would fail loudly
    buf = io.BytesIO()
    pickle.dump("not a rule set", buf)
    second.write_bytes(buf.getvalue())
    second.chmod(0o666)
    assert cache._read(second, pack) is None
    second.chmod(0o600)
    assert cache._read(second, pack) is None  # owned and private, but not a RuleSet: loaded from the pack instead


def test_the_settings_cache_follows_an_edit_of_the_configuration(tmp_path, monkeypatch):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("cluster: one\n")
    monkeypatch.setenv("ATTRIBUTION_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ATTRIBUTION_CACHE_DIR", raising=False)
    assert node_settings(cfg).cluster == "one"
    assert list((tmp_path / "home" / "cache").glob("settings-*.json"))
    assert node_settings(cfg).cluster == "one"  # from the cache
    cfg.write_text("cluster: two\n")
    assert node_settings(cfg).cluster == "two"


def test_the_attribution_command_hands_epilog_to_the_node_agent_without_click(tmp_path):
    env, argv = node(tmp_path, "database")
    probe = ("import sys, json\nfrom attribution.entry import main\nsys.argv = ['attribution'] + sys.argv[1:]\n"
             "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
             "print('MODULES ' + json.dumps(sorted(sys.modules)))\n")
    r = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert "spooled to" in r.stdout + r.stderr, r.stdout + r.stderr
    mods = set(json.loads(r.stdout.rpartition("MODULES ")[2]))
    assert "click" not in mods


def test_the_central_commands_refuse_an_old_python_with_one_line(monkeypatch, capsys):
    from attribution import entry

    monkeypatch.setattr(entry, "CENTRAL_PYTHON", (99, 0))
    with pytest.raises(SystemExit) as e:
        entry.main(["db", "upgrade"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs Python 3.11 or newer" in err[0]


def test_a_central_command_on_a_slim_install_names_the_extra_to_install(tmp_path):
    probe = ("import sys\nfor m in ('psycopg', 'sqlalchemy', 'alembic'):\n    sys.modules[m] = None  # not installed\n"
             "from attribution.entry import main\nsys.argv = ['attribution', 'db', 'upgrade']\nmain()\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "ATTRIBUTION_HOME": str(tmp_path)}, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "attribution: this command needs attribution[db] (no module 'psycopg' here): pip install 'attribution[db]'"]
