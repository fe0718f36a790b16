"""A node epilog with `database.delivery: inbox` (node/inbox_client.py, node/epilog.py submit_or_spool): the hook
hands its report to the database's inbox in one statement, spools it when the database is away, and replays its
spool into the inbox exactly once (the digest); the central drain then makes the verdict."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from attribution.api.intake import parse_report
from attribution.config import Settings
from attribution.config.sections import DatabaseSettings, EpilogSettings
from attribution.inbox import drain_inbox
from attribution.node import epilog, spool
from attribution.scope.slurm import parse_env

from tests.conftest import ROOT

UTC = timezone.utc
START = datetime(2026, 3, 10, 8, 0, tzinfo=UTC)
END = datetime(2026, 3, 10, 10, 0, tzinfo=UTC)
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
ENV = {"SLURM_JOB_ID": "777", "SLURM_NODELIST": "g01", "SLURM_JOB_EXIT_CODE": "256", "SLURM_CLUSTER_NAME": "test",
       "SLURM_JOB_USER": "alice", "SLURM_JOB_START_TIME": str(int(START.timestamp())),
       "SLURM_JOB_END_TIME": str(int(END.timestamp())), "SLURMD_NODENAME": "g01",
       "SLURM_SCRIPT_CONTEXT": "epilog_slurmd"}


def _no_store():
    raise AssertionError("inbox mode must not open the store")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _url(pg_url: str, port: int | None = None) -> str:
    u = make_url(pg_url)
    return f"postgresql://{u.username}@127.0.0.1:{port or u.port}/{u.database}?sslmode=disable"


def _settings(tmp_path: Path, url: str) -> Settings:
    kern = tmp_path / "kern.log"
    if not kern.exists():
        kern.write_text(f"Mar 10 09:14:37 g01 kernel: {XID79}\n")
    return Settings(home=tmp_path / "home",
                    database=DatabaseSettings(url=url, delivery="inbox", connect_timeout=1),
                    epilog=EpilogSettings(kernel_source="file", kernel_file=str(kern),
                                          fabricmanager_log=str(tmp_path / "no-fm")))


def _run(ruleset, settings, job="777"):
    env = parse_env(dict(ENV, SLURM_JOB_ID=job))
    return epilog.run_node(ruleset, settings, env, _no_store, time.monotonic() + 10, now=END)


def _inbox(store) -> list:
    with store.connect() as c:
        return c.execute(text("SELECT job_id, payload FROM attribution.inbox_reports ORDER BY job_id")).all()


def test_the_hook_queues_its_report_and_the_drain_makes_the_verdict(ruleset, store, pg_url, tmp_path):
    r = _run(ruleset, _settings(tmp_path, _url(pg_url)))
    assert (r.queued, r.stored, r.spooled, r.error) == (True, False, None, None), r.line()
    assert "queued in the inbox" in r.line()
    [(job, doc)] = _inbox(store)
    assert (job, doc["source"], [e["kind"] for e in doc["events"]]) == ("777", "node", ["gpu_fallen_off_bus"])
    res = drain_inbox(ruleset, store, lambda d, o: parse_report(d, o))
    assert (res.stored, res.attributed) == (1, 1)
    with store.connect() as c:
        assert c.execute(text("SELECT outcome, culprit_nodes FROM attribution.job_verdicts")).all() == [
            ("gpu_hardware", ["g01"])]


def test_a_database_away_spools_and_the_next_run_replays_into_the_inbox_once(ruleset, store, pg_url, tmp_path):
    away = _run(ruleset, _settings(tmp_path, _url(pg_url, _closed_port())), job="778")
    assert away.spooled is not None and not away.queued and "WireError" in away.error, away.line()
    [spooled] = spool.pending(tmp_path / "home" / "spool")
    keep = tmp_path / "copy.spool"
    shutil.copy(spooled, keep)
    back = _run(ruleset, _settings(tmp_path, _url(pg_url)), job="779")
    assert (back.queued, back.replayed, back.spooled) == (True, 1, None), back.line()
    assert [j for j, _ in _inbox(store)] == ["778", "779"]
    # the same spooled payload once more (a replay whose answer was lost): the digest makes it the same row
    shutil.copy(keep, tmp_path / "home" / "spool" / keep.name)
    again = _run(ruleset, _settings(tmp_path, _url(pg_url)), job="779")
    assert (again.queued, again.replayed) == (True, 1), again.line()
    assert [j for j, _ in _inbox(store)] == ["778", "779"]
    assert spool.pending(tmp_path / "home" / "spool") == []


def test_a_payload_the_inbox_refuses_goes_to_bad_and_the_rest_is_replayed(ruleset, store, pg_url, tmp_path):
    home = tmp_path / "home"
    spool.write(home / "spool", {"type": "ingest", "context": {"cluster": "test"}})  # no job id
    r = _run(ruleset, _settings(tmp_path, _url(pg_url)))
    assert (r.queued, r.replayed) == (True, 0), r.line()
    bad = sorted((home / "spool" / "bad").glob("*.reason"))
    assert len(bad) == 1 and "refused by the inbox: ERROR 22023" in bad[0].read_text()


def test_spool_flush_replays_into_the_inbox_without_the_rule_pack_or_the_store(store, pg_url, tmp_path):
    home = tmp_path / "home"
    doc = {"type": "ingest", "source": "node", "context": {"cluster": "test", "job_id": "780", "nodes": ["g01"]},
           "events": [], "coverage": []}
    spool.write(home / "spool", doc)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database:\n  url: {_url(pg_url)}\n  delivery: inbox\n")
    probe = ("import json, sys\nfrom attribution.node.agent import main\ncode = main(sys.argv[1:])\n"
             "print('MODULES ' + json.dumps(sorted(sys.modules)))\nsys.exit(code)\n")
    env = {"PATH": "/usr/bin:/bin", "ATTRIBUTION_CONFIG": str(cfg), "ATTRIBUTION_HOME": str(home)}
    r = subprocess.run([sys.executable, "-c", probe, "spool", "flush"], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    out, _, mods = r.stdout.rpartition("MODULES ")
    assert "replayed 1, left 0, bad 0" in out
    modules = set(json.loads(mods))
    assert not {m for m in modules if m.split(".")[0] in ("sqlalchemy", "psycopg")}
    assert "attribution.rulepack.cache" not in modules
    assert [j for j, _ in _inbox(store)] == ["780"]
