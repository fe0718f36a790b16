"""The wheel as a new user installs it: built once per session, installed into fresh venvs of every Python present.

- Central side (the system's 3.11, 3.12, 3.13) with `attribution[all]`: every command that reads the shipped
  data works from an unrelated folder (--version, rules path, rules check, diagnose of a shipped incident, db
  upgrade and ingest on a real PostgreSQL), as root and as an ordinary user (nobody).
- Node side (3.9, 3.10): the slim install (`attribution`, nothing else) spools a failed job's report while the
  service is away; with `[db]` it spools while the database is away, and the central side stores that file once.
An interpreter that is not on this machine is skipped, and the skip names it. An interpreter the ordinary user
cannot execute (pyenv's under /root, mode 0700) is copied where that user can (runnable_by).
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
from tests.harness import apt
from tests.test_node_agent import node

pytestmark = pytest.mark.slow

CENTRAL = {"3.11": ["/usr/bin/python3.11"], "3.12": ["/root/.pyenv/versions/3.12*/bin/python3.12"],
           "3.13": ["/root/.pyenv/versions/3.13*/bin/python3.13"]}
NODE = {"3.9": ["/root/.pyenv/versions/3.9*/bin/python3.9"], "3.10": ["/root/.pyenv/versions/3.10*/bin/python3.10"]}


def find_python(version: str, patterns: list[str]) -> str | None:
    found = shutil.which(f"python{version}")
    candidates = sorted(p for pat in patterns for p in glob.glob(pat)) + ([found] if found else [])
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
    # --prefer-binary: a node's pip should take the newest release with a wheel for its Python (docs/install.md)
    r = subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", "--prefer-binary", spec],
                       capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    subprocess.run(["chmod", "-R", "a+rX", str(where)], check=True)
    return where


@pytest.fixture(scope="session")
def venv_for(dist):
    """venv_for(python, extras): one fresh venv per interpreter and extras for the session, in a folder any user
    may enter (pytest's basetemp is 0700 under root)."""
    top = Path(tempfile.mkdtemp(prefix="attribution-pkg-"))
    top.chmod(0o755)
    made: dict[tuple[str, str], Path] = {}

    def make(python: str, extras: str) -> Path:
        key = (python, extras)
        if key not in made:
            spec = f"{wheel_of(dist)}[{extras}]" if extras else str(wheel_of(dist))
            made[key] = make_venv(python, spec, top / f"venv-{len(made)}")
        return made[key]

    yield make
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def public_dir():
    """A folder this test owns that any user may enter."""
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
                 "attribution/_data/migrations/env.py", "attribution/_data/migrations/versions/01_0001_initial.py",
                 "attribution/_data/sql/10_job_verdicts.sql", "attribution/_data/sql/grafana/attribution-fleet.json",
                 "attribution/_data/hooks/epilog", "attribution/_data/hooks/lib.sh",
                 "attribution/_data/incidents/06-ib-link-down/context.yaml", "attribution/resources.py",
                 "attribution/_data/hooks/systemd/attribution.service", "attribution/web/templates/base.html"):
        assert want in names, want
    info = zipfile.ZipFile(wheel_of(dist)).getinfo("attribution/_data/hooks/epilog")
    assert (info.external_attr >> 16) & 0o111, "the hooks keep their executable bit"
    [sdist] = dist.glob("attribution-*.tar.gz")
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert {"rules/kinds.yaml", "migrations/env.py", "sql/grafana/attribution-fleet.json", "hooks/epilog",
            "tests/incidents/06-ib-link-down/context.yaml", "setup.py"} <= members


def shipped_incident(venv: Path) -> Path:
    [incident] = list(venv.glob("lib/python*/site-packages/attribution/_data/incidents/06-ib-link-down"))
    return incident


def smoke(user: str | None, venv: Path, work: Path, pg_url: str) -> None:
    """Every command that reads the shipped data, from an unrelated folder, as `user` (None: root)."""
    bin_ = venv / "bin" / "attribution"
    incident = shipped_incident(venv)
    r = as_user(user, [str(bin_), "--version"], work)
    assert r.returncode == 0 and r.stdout.strip() == "attribution 0.1.0", r.stdout + r.stderr
    r = as_user(user, [str(bin_), "rules", "path"], work)
    assert r.returncode == 0 and Path(r.stdout.strip()) == incident.parents[1] / "rules", r.stdout + r.stderr
    r = as_user(user, [str(bin_), "rules", "check"], work)
    assert r.returncode == 0 and ": ok (version" in r.stdout, r.stdout + r.stderr
    r = as_user(user, [str(bin_), "diagnose", str(incident), "--json"], work)
    assert r.returncode == 0 and '"outcome"' in r.stdout, r.stdout + r.stderr
    env = {"ATTRIBUTION_DATABASE_URL": pg_url}
    r = as_user(user, [str(bin_), "db", "upgrade"], work, env)
    assert r.returncode == 0 and "at revision" in r.stdout, r.stdout + r.stderr
    r = as_user(user, [str(bin_), "ingest", str(incident)], work, env)
    assert r.returncode == 0 and "new verdict" in r.stdout, r.stdout + r.stderr


def runnable_by(user: str, python: str, public_dir: Path) -> str:
    """`python`, or, when `user` cannot run it (pyenv's interpreters live under /root, mode 0700), a copy of its
    installation in `public_dir` that anyone may run: the copy's interpreter finds its libpython beside it
    (patchelf sets its RUNPATH to $ORIGIN/../lib; pyenv's is the absolute path under /root)."""
    real = os.path.realpath(python)
    if as_user(user, [real, "-c", "pass"], public_dir).returncode == 0:
        return real
    prefix = Path(subprocess.run([real, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                                 text=True, check=True).stdout.strip())
    copy = public_dir / f"python-{prefix.name}"
    shutil.copytree(prefix, copy, symlinks=True,
                    ignore=shutil.ignore_patterns("test", "idlelib", "tkinter", "turtledemo", "site-packages"))
    patchelf = shutil.which("patchelf")
    if patchelf is None:
        r = apt.install(["patchelf"])
        assert r.returncode == 0, f"{r.command}: {r.output[-2000:]}"
        patchelf = "patchelf"
    copied = copy / "bin" / Path(real).name
    subprocess.run([patchelf, "--set-rpath", "$ORIGIN/../lib", str(copied)], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(copy)], check=True)
    r = as_user(user, [str(copied), "-c", "import sys; print(sys.prefix)"], public_dir)
    assert r.returncode == 0 and r.stdout.strip() == str(copy), r.stdout + r.stderr
    return str(copied)


def work_dir(public_dir: Path, owner: int | None = None) -> Path:
    work = public_dir / "elsewhere"
    (work / "home").mkdir(parents=True)
    if owner is not None:
        os.chown(work / "home", owner, owner)
    return work


@pytest.mark.parametrize("version", sorted(CENTRAL))
def test_the_central_side_from_the_wheel_as_root(version, venv_for, public_dir, pg_url):
    venv = venv_for(need_python(version, CENTRAL[version]), "all")
    smoke(None, venv, work_dir(public_dir), pg_url)


@pytest.mark.parametrize("version", sorted(CENTRAL))
def test_the_central_side_from_the_wheel_as_an_ordinary_user(version, venv_for, public_dir, pg_url):
    python = runnable_by("nobody", need_python(version, CENTRAL[version]), public_dir)
    venv = venv_for(python, "all")
    smoke("nobody", venv, work_dir(public_dir, owner=65534), pg_url)


@pytest.mark.parametrize("version", sorted(NODE))
def test_the_slim_node_install_spools_while_the_service_or_the_database_is_away(version, venv_for, tmp_path):
    venv = venv_for(need_python(version, NODE[version]), "")
    env, argv = node(tmp_path, "service")
    r = subprocess.run([str(venv / "bin" / "attribution"), *argv], env={**env, "HOME": str(tmp_path)},
                       capture_output=True, text=True, timeout=120, cwd="/")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "node job 4242; 1 event(s)" in out and "spooled to" in out, out
    (tmp_path / "db").mkdir()
    env, argv = node(tmp_path / "db", "database")  # configured for the database: it has no driver
    r = subprocess.run([str(venv / "bin" / "attribution"), *argv], env={**env, "HOME": str(tmp_path)},
                       capture_output=True, text=True, timeout=120, cwd="/")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "spooled to" in out and "needs attribution[db]" in out, out
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.util as u; print([m for m in "
                           "('sqlalchemy', 'alembic', 'fastapi', 'altair', 'psycopg', 'httpx') "
                           "if u.find_spec(m)])"], capture_output=True, text=True)
    assert site.stdout.strip() == "[]", "the slim install pulls only what the node agent needs"


def test_the_nvml_extra_reads_gpus_on_python_39_and_is_a_gap_without_the_driver(venv_for, tmp_path):
    """`attribution[nvml]` on the oldest node Python: nvidia-ml-py from the registry installs, `attribution
    nvml-snapshot` runs, and on a machine without libnvidia-ml (this one) writes one note instead of failing;
    over a fake libnvidia-ml (tests/harness/fakenvml.py) the installed agent reads the GPUs."""
    venv = venv_for(need_python("3.9", NODE["3.9"]), "nvml")
    out = tmp_path / "nvml.txt"
    r = subprocess.run([str(venv / "bin" / "attribution"), "nvml-snapshot", str(out)], capture_output=True,
                       text=True, timeout=120, cwd="/", env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert out.read_text() == "note NVML unavailable: NVML Shared Library Not Found\n"
    spec = tmp_path / "gpus.json"
    spec.write_text('[{"bus": "1b"}, {"bus": "61", "handle_error": 15}]')
    probe = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests' / 'harness')!r}); import fakenvml, json; "
             f"fakenvml.install(fakenvml.gpus_from_spec(json.load(open({str(spec)!r})))); "
             "from attribution.node.agent import main; import attribution; print(attribution.__file__); "
             f"sys.exit(main(['nvml-snapshot', {str(out)!r}]))")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=120,
                       cwd="/")
    assert r.returncode == 0 and str(venv) in r.stdout, r.stdout + r.stderr  # the installed package, not ROOT's
    lines = out.read_text().splitlines()
    assert lines[0] == "driver 535.183.01" and "gpu 0000:1b:00 ecc.volatile.dram_uncorrectable 0" in lines
    assert "lost #1 GPU is lost" in lines


@pytest.mark.parametrize("version", sorted(NODE))
def test_the_node_agent_spools_while_the_database_is_away(version, venv_for, tmp_path, pg_url):
    python = need_python(version, NODE[version])
    venv = venv_for(python, "db")
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
