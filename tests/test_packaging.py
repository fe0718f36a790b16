"""The wheel as a new user installs it: built once per session, installed into fresh venvs of every Python present.

- Central side (3.11 system Python, 3.12, 3.13): `attribution[all]`; every command that reads the shipped data
  works from an unrelated directory, as root and as an ordinary user (nobody): --version, rules path, rules check,
  diagnose of a shipped incident, db upgrade and ingest on a real PostgreSQL.
- Node side (3.9, 3.10): `attribution[db]` (the node agent and its database writer); a failed job's report is
  spooled while the database is away, and the central side stores that spool file once.
An interpreter that is not on this machine is skipped, and the skip names it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_node_agent import node

pytestmark = pytest.mark.slow

CENTRAL = {"3.11": ["/usr/bin/python3.11"], "3.12": ["/root/.pyenv/versions/3.12*/bin/python3.12"],
           "3.13": ["/root/.pyenv/versions/3.13*/bin/python3.13"]}
NODE = {"3.9": ["/root/.pyenv/versions/3.9*/bin/python3.9"], "3.10": ["/root/.pyenv/versions/3.10*/bin/python3.10"]}


def find_python(version: str, patterns: list[str]) -> str | None:
    found = shutil.which(f"python{version}")
    candidates = ([found] if found else []) + sorted(p for pat in patterns for p in glob.glob(pat))
    for c in candidates:
        r = subprocess.run([c, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                           text=True)
        if r.returncode == 0 and r.stdout.strip() == version:
            return c
    return None


def need_python(version: str, patterns: list[str]) -> str:
    py = find_python(version, patterns)
    if py is None:
        pytest.skip(f"Python {version} is not on this machine (looked for python{version} and {', '.join(patterns)})")
    return py


@pytest.fixture(scope="session")
def dist() -> Path:
    """The wheel and sdist built from this checkout, once per session."""
    out = Path(tempfile.mkdtemp(prefix="attribution-dist-"))
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    yield out
    shutil.rmtree(out, ignore_errors=True)


def wheel_of(dist: Path) -> Path:
    [w] = dist.glob("attribution-*.whl")
    return w


def make_venv(python: str, spec: str, where: Path) -> Path:
    """A fresh venv in `where` (world-searchable, so that nobody can run it) with `spec` installed."""
    r = subprocess.run([python, "-m", "venv", str(where)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", spec], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    subprocess.run(["chmod", "-R", "a+rX", str(where)], check=True)
    return where


@pytest.fixture
def public_dir():
    """A directory this test owns that any user may enter (pytest's basetemp is 0700 under root)."""
    d = Path(tempfile.mkdtemp(prefix="attribution-pkg-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_user(user: str | None, argv: list[str], cwd: Path, env: dict | None = None):
    base = {"PATH": "/usr/bin:/bin", "HOME": str(cwd / "home"), "LC_ALL": "C.UTF-8"}
    base.update(env or {})
    if user is not None:
        argv = ["runuser", "-u", user, "--", "env", *[f"{k}={v}" for k, v in base.items()], *argv]
        base = None
    return subprocess.run(argv, cwd=cwd, env=base, capture_output=True, text=True, timeout=600)


def test_the_wheel_and_sdist_carry_the_data(dist):
    import tarfile
    import zipfile

    names = set(zipfile.ZipFile(wheel_of(dist)).namelist())
    for want in ("attribution/_data/rules/kinds.yaml", "attribution/_data/rules/schema/rules.schema.json",
                 "attribution/_data/migrations/env.py", "attribution/_data/migrations/versions/0001_initial.py",
                 "attribution/_data/sql/10_job_verdicts.sql", "attribution/_data/sql/grafana/attribution-fleet.json",
                 "attribution/_data/hooks/epilog", "attribution/_data/hooks/lib.sh",
                 "attribution/_data/incidents/06-ib-link-down/context.yaml", "attribution/resources.py"):
        assert want in names, want
    info = zipfile.ZipFile(wheel_of(dist)).getinfo("attribution/_data/hooks/epilog")
    assert (info.external_attr >> 16) & 0o111, "the hooks keep their executable bit"
    [sdist] = dist.glob("attribution-*.tar.gz")
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert {"rules/kinds.yaml", "migrations/env.py", "sql/grafana/attribution-fleet.json", "hooks/epilog",
            "tests/incidents/06-ib-link-down/context.yaml", "setup.py"} <= members


@pytest.mark.parametrize("version", sorted(CENTRAL))
def test_the_central_side_from_the_wheel_on_every_python(version, dist, public_dir, pg_url):
    python = need_python(version, CENTRAL[version])
    venv = make_venv(python, f"{wheel_of(dist)}[all]", public_dir / "venv")
    bin_ = venv / "bin" / "attribution"
    work = public_dir / "elsewhere"
    work.mkdir()
    (work / "home").mkdir()
    os.chown(work / "home", 65534, 65534)
    incident = venv.glob("lib/python*/site-packages/attribution/_data/incidents/06-ib-link-down")
    [incident] = list(incident)
    for user in (None, "nobody"):
        r = as_user(user, [str(bin_), "--version"], work)
        assert r.returncode == 0 and r.stdout.strip() == "attribution 0.1.0", r.stdout + r.stderr
        r = as_user(user, [str(bin_), "rules", "path"], work)
        assert r.returncode == 0 and Path(r.stdout.strip()) == incident.parents[1] / "rules", r.stdout + r.stderr
        r = as_user(user, [str(bin_), "rules", "check"], work)
        assert r.returncode == 0 and ": ok (version" in r.stdout, r.stdout + r.stderr
        r = as_user(user, [str(bin_), "diagnose", str(incident), "--json"], work)
        assert r.returncode == 0 and '"outcome"' in r.stdout, r.stdout + r.stderr
    env = {"ATTRIBUTION_DATABASE_URL": pg_url}
    r = as_user(None, [str(bin_), "db", "upgrade"], work, env)
    assert r.returncode == 0 and "at revision" in r.stdout, r.stdout + r.stderr
    r = as_user("nobody", [str(bin_), "ingest", str(incident)], work, env)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("version", sorted(NODE))
def test_the_node_agent_alone_spools_while_the_database_is_away(version, dist, public_dir, tmp_path, pg_url):
    python = need_python(version, NODE[version])
    venv = make_venv(python, f"{wheel_of(dist)}[db]", public_dir / "venv")
    env, argv = node(tmp_path, "database")
    env = {**env, "HOME": str(tmp_path)}
    r = subprocess.run([str(venv / "bin" / "attribution"), *argv], env=env, capture_output=True, text=True,
                       timeout=120, cwd="/")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "node job 4242; 1 event(s)" in out and "spooled to" in out, out
    # what the central side needs refuses this Python with one line
    r = subprocess.run([str(venv / "bin" / "attribution"), "db", "upgrade"], env=env, capture_output=True,
                       text=True, timeout=60, cwd="/")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"needs Python 3.11 or newer (this is {version}." in r.stderr
    # the spooled report is whole: the central side (this suite's Python) stores it once the database is back
    from tests.harness.hooknode import BIN

    cfg = Path(env["ATTRIBUTION_CONFIG"])
    cfg.write_text(f"database:\n  url: {pg_url}\n")
    r = subprocess.run([str(BIN), "spool", "flush"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "replayed 1, left 0, bad 0" in r.stdout, r.stdout + r.stderr
