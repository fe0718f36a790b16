"""Crash consistency: an `attribution ingest` killed with SIGKILL at any moment leaves a consistent database, and
running it again ends exactly where one clean ingest ends; a spool file cut off mid-write is never replayed half,
a complete one is replayed exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from attribution.node import spool
from attribution.fleetgen import history, write_bundle

from tests.conftest import INCIDENTS, ROOT
from tests.harness.storecheck import check_consistent, snapshot

pytestmark = pytest.mark.slow  # processes killed at random points, many times over

ROUNDS = 5  # fresh databases
KILLS_PER_ROUND = 10  # SIGKILLed ingests per database, then one run to completion
HEAVY = ("04-xid74-nvlink", "05-nvswitch-fatal-sxid")


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    """Generated fleet history (one bundle per job, one transaction each) plus the heaviest example incidents."""
    out = tmp_path_factory.mktemp("crash-bundles")
    jobs = history(weeks=1, end=datetime(2026, 6, 15, tzinfo=timezone.utc), seed=7, jobs_per_week=10)
    return [str(write_bundle(j, out)) for j in jobs] + [str(INCIDENTS / h) for h in HEAVY]


def _ingest(url: str, bundles: list[str], home: Path) -> subprocess.Popen:
    env = dict(os.environ, ATTRIBUTION_DATABASE_URL=url, ATTRIBUTION_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("ATTRIBUTION_CONFIG", None)
    return subprocess.Popen([sys.executable, "-m", "attribution.cli", "ingest", *bundles], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class ForkedIngest:
    """`attribution ingest BUNDLE...` (the CLI command, click and all) in a child forked from this warm process, so
    that a trial costs the ingest and not the interpreter start; the rule pack is the one loaded once here. The child
    leaves with os._exit: nothing of the parent's (pooled connections) is closed or flushed by it.

    `kill_at=(n, when)`: the child SIGKILLs itself at its n-th SQL statement, `before` it is sent or `after` its
    answer came (an event of the ingest, not a moment: the same trial kills at the same point on a busy machine);
    `count_to`: a file the child writes its number of SQL statements to."""

    def __init__(self, url: str, bundles: list[str], home: Path, ruleset, kill_at: tuple[int, str] | None = None,
                 count_to: Path | None = None) -> None:
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child
            code = 70
            seen = [0]
            try:
                os.environ.update(ATTRIBUTION_DATABASE_URL=url, ATTRIBUTION_HOME=str(home))
                os.environ.pop("ATTRIBUTION_CONFIG", None)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                from sqlalchemy import event
                from sqlalchemy.engine import Engine

                import attribution.cli.db as clidb
                from attribution.cli import main

                def before(*_a):
                    seen[0] += 1
                    if kill_at == (seen[0], "before"):
                        os.kill(os.getpid(), signal.SIGKILL)

                def after(*_a):
                    if kill_at == (seen[0], "after"):
                        os.kill(os.getpid(), signal.SIGKILL)

                event.listen(Engine, "before_cursor_execute", before)
                event.listen(Engine, "after_cursor_execute", after)
                clidb.ruleset_of = lambda ctx: ruleset
                try:
                    main.main(args=["ingest", *bundles], prog_name="attribution", standalone_mode=True)
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
                if count_to is not None:
                    count_to.write_text(str(seen[0]))
            finally:
                os._exit(code)
        self.status: int | None = None

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.status is None:
            pid, st = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
                break
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.002)
        return self.status

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.wait()


def test_ingest_killed_at_random_points_leaves_a_consistent_store(workload, ruleset, pg_url, pg_server, pg_template,
                                                                  tmp_path):
    home = tmp_path / "home"
    clean = create_engine(pg_url)
    t0 = time.monotonic()
    counted = tmp_path / "statements"
    assert ForkedIngest(pg_url, workload, home, ruleset, count_to=counted).wait(timeout=300) == 0
    duration = time.monotonic() - t0
    statements = int(counted.read_text())  # of a clean run; a shuffled order sends about as many
    reference = snapshot(clean)
    clean.dispose()
    assert len(reference["jobs"]) == len(workload) and sum(reference["verdicts"].values()) == len(workload)

    # The forked command is the real command: a separately started `attribution ingest` stores the same.
    name = f"crash_{uuid.uuid4().hex[:10]}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        p = _ingest(url, workload, home)
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        e = create_engine(url)
        assert snapshot(e) == reference
        e.dispose()
    finally:
        pg_server.drop_database(name)

    rng = random.Random(int(os.environ.get("ATTRIBUTION_CRASH_SEED", "20261130")))
    admin = create_engine(pg_server.url("postgres"))
    stats = Counter()
    try:
        for rnd in range(ROUNDS):
            name = f"crash_{uuid.uuid4().hex[:10]}"
            url = pg_server.create_database(name, template=pg_template)
            engine = create_engine(url)
            try:
                for k in range(KILLS_PER_ROUND):
                    order = workload[:]
                    rng.shuffle(order)
                    # one kill per stratum of the clean run's statements, so every phase gets hit; before a
                    # statement is sent or after its answer, inside the transaction either way
                    at = (1 + int((k + rng.random()) * (statements - 1) / KILLS_PER_ROUND), rng.choice(
                        ("before", "after")))
                    admin.dispose()
                    engine.dispose()
                    child = ForkedIngest(url, order, home, ruleset, kill_at=at)
                    status = child.wait(timeout=300)
                    if status == -signal.SIGKILL:
                        stats["killed"] += 1
                        stats[f"killed {at[1]} a statement"] += 1
                    stats["trials"] += 1
                    stored = check_consistent(engine, reference)
                    stats["jobs stored after the kill (sum over trials)"] += stored["jobs"]
                engine.dispose()
                admin.dispose()
                assert ForkedIngest(url, workload, home, ruleset).wait(timeout=300) == 0
                check_consistent(engine, reference)
                assert snapshot(engine) == reference, "after re-running, the store differs from one clean ingest"
                stats["re-runs equal to the clean ingest"] += 1
            finally:
                engine.dispose()
                pg_server.drop_database(name)
    finally:
        admin.dispose()
    print(f"\ncrash consistency: clean ingest of {len(workload)} bundles {duration:.2f} s, {statements} SQL "
          f"statements; {dict(stats)}")
    assert stats["trials"] == ROUNDS * KILLS_PER_ROUND >= 50
    # kill points are statements of a clean run on an empty store; a later trial sends fewer (what earlier trials
    # stored is not stored again), so its late points may lie past its end: it then completes. Which trials are
    # killed depends on the seed only, never on the machine's load.
    assert stats["killed"] >= 25
    assert stats["killed before a statement"] >= 5 and stats["killed after a statement"] >= 5


# -- the spool ---------------------------------------------------------------------------------------------------


def _payload(rng: random.Random, n: int) -> dict:
    return {"type": "ingest", "n": n, "source": "node", "events": [
        {"line": "".join(rng.choice("abc xyz:[]\u00e9") for _ in range(rng.randint(0, 300)))}
        for _ in range(rng.randint(0, 20))]}


def _cut(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """What a power loss can leave of a file whose rename reached the disk before its data."""
    off = rng.randrange(0, len(data))
    how = rng.choice(["truncated", "zero-filled", "garbage tail", "hole"])
    if how == "truncated":
        return data[:off], how
    if how == "zero-filled":  # size committed, blocks not: zeros from the cut on
        return data[:off] + b"\0" * (len(data) - off), how
    if how == "garbage tail":
        return data[:off] + bytes(rng.randrange(256) for _ in range(len(data) - off)), how
    end = min(len(data), off + rng.randint(1, 4096))  # one unwritten block in the middle
    return data[:off] + b"\0" * (end - off) + data[end:], how


def test_spool_files_cut_at_random_offsets_are_never_replayed_half(tmp_path):
    rng = random.Random(int(os.environ.get("ATTRIBUTION_CRASH_SEED", "20261130")))
    trials = Counter()
    for t in range(400):
        d = tmp_path / f"spool{t}"
        d.mkdir()
        payloads = [_payload(rng, i) for i in range(rng.randint(1, 5))]
        cut = set(rng.sample(range(len(payloads)), k=rng.randint(1, len(payloads))))
        for i, p in enumerate(payloads):
            data = spool.encode(p)
            if i in cut:
                data, how = _cut(data, rng)
                trials[how] += 1
            (d / f"{i:020d}-1-0000000{i}{spool.SUFFIX}").write_bytes(data)
        seen: list[dict] = []
        res = spool.flush(d, seen.append)
        assert seen == [p for i, p in enumerate(payloads) if i not in cut]
        assert len(res.bad) == len(cut) and res.error is None
        assert len(list((d / "bad").glob("*.spool"))) == len(cut) and spool.pending(d) == []
        assert spool.flush(d, seen.append).replayed == 0 and len(seen) == len(payloads) - len(cut)
    print(f"\nspool cut-off trials: {sum(trials.values())} cut files ({dict(trials)}) in 400 spools, none replayed")
    assert sum(trials.values()) >= 400


WRITER = """
import sys, random
from pathlib import Path
from attribution.node import spool
d, seed = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
i = 0
while True:
    spool.write(d, {"n": i, "seed": seed, "pad": "x" * rng.randint(1, 1_000_000)})
    i += 1
"""


def test_a_spool_writer_killed_mid_write_leaves_only_whole_files(tmp_path):
    """SIGKILL while `spool.write` runs: only whole files are ever pending; each is replayed once; the temporary
    file of the interrupted write is never replayed and is cleaned up once stale."""
    rng = random.Random(7)
    replayed = interrupted = 0
    for t in range(20):
        d = tmp_path / f"s{t}"
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(d), str(t)], cwd=ROOT)
        if t % 2:  # at a random moment
            time.sleep(rng.uniform(0.15, 0.6))
        else:  # the moment a write is under way (its temporary file exists), after a few whole files
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                names = [x.name for x in d.iterdir()] if d.exists() else []
                if len(names) > t % 5 and any(n.startswith(".tmp-") for n in names):
                    break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        tmps = [x for x in d.iterdir() if x.name.startswith(".tmp-")] if d.exists() else []
        interrupted += bool(tmps)
        seen: list[dict] = []
        res = spool.flush(d, seen.append, stale_tmp_seconds=0)
        assert res.bad == [] and [s["n"] for s in seen] == list(range(len(seen)))
        assert all(s["seed"] == t for s in seen)
        assert not any(x.name.startswith(".tmp-") for x in d.iterdir()) if d.exists() else True
        assert spool.flush(d, seen.append).replayed == 0
        replayed += len(seen)
    print(f"\nspool writer killed 20 times: {replayed} whole files replayed once each, {interrupted} kills "
          f"interrupted a write (left a temporary file, never replayed)")
    assert interrupted >= 5


def test_the_spool_payload_encoding_is_deterministic():
    p = {"b": 1, "a": [1, 2, {"x": "é"}]}
    assert spool.encode(p) == spool.encode(json.loads(json.dumps(p)))
