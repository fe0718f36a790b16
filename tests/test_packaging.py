"""The wheel as a new user installs it: built once (`pip wheel --no-deps`), installed with each extra of
pyproject.toml into a clean venv, where every module that extra serves is imported.

Which part of the package each extra serves is SERVES (a module or package -> the extra; the longest name that
matches wins). An extra's install must import each module it serves or that an extra it includes serves, and find
every third-party module those modules can import, in a function too (httpx, imported only when an alert went out,
was declared in no extra but `test`), following attribution's own imports (tests/harness/package_imports.py). The
command line (EDGES) is the exception: its modules import a command's needs when the command runs, and a command
whose module is missing says which extra to install (attribution.cli.EXTRA_OF), so for them the test checks that
EXTRA_OF names an extra that declares the module.

- The base install is the node collector: no third-party package at all, and `attribution-node --version`,
  `attribution-node epilog` (outside Slurm: one line, exit 0) and the limited `attribution --help`, `--version`
  and `rules path` work on the node Pythons (3.9, 3.10).
- The central side (3.11, 3.12, 3.13) with `attribution[all]`: every command that reads the shipped data works
  from an unrelated folder (--version, rules path, rules check, diagnose of a shipped incident, db upgrade and
  ingest on a real PostgreSQL), as root and as an ordinary user (nobody).
An interpreter that is not on this machine is skipped, and the skip names it. An interpreter the ordinary user
cannot execute (pyenv's under /root, mode 0700) is copied where that user can (runnable_by).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from attribution.cli import EXTRA_OF
from tests.conftest import ROOT
from tests.harness import apt
from tests.harness.package_imports import Package

#: module or package -> the extra whose install must import it (the longest matching name wins)
SERVES = {
    "attribution": "engine",  # the rule pack, scope, collect, extract, correlate, config, the command line
    "attribution.node": "base", "attribution.entry": "base", "attribution.resources": "base",
    "attribution.store": "db", "attribution.pipeline.controller": "db", "attribution.pipeline.drain": "db",
    "attribution.pipeline.history": "db", "attribution.pipeline.jobactions": "db", "attribution.pipeline.ingest": "db", "attribution.pipeline.intake": "db",
    "attribution.reports": "reports",
    "attribution.store.embedded": "embedded",
    "attribution.api": "server", "attribution.web": "server", "attribution.alerts": "server",
    "attribution.drain.slurmrest": "server",
    "attribution.collect.kubeapi": "kubernetes", "attribution.collect.podlogs": "kubernetes",
    "attribution.watch": "kubernetes",
}
#: the command line: a command imports what it needs when it runs, and names the extra when that is missing
EDGES = ("attribution.cli", "attribution.entry")
#: third-party modules only some platforms install, each imported where its absence is handled
OPTIONAL = {"hyperscan": "wheels for x86-64 Linux only; elsewhere the prefilter runs on RE2 (rulepack/prefilter.py)"}
EXTRAS = ("base", "engine", "db", "reports", "server", "embedded", "kubernetes", "all")
CENTRAL = {"3.11": ["/usr/bin/python3.11"], "3.12": ["/root/.pyenv/versions/3.12*/bin/python3.12"],
           "3.13": ["/root/.pyenv/versions/3.13*/bin/python3.13"]}
NODE = {"3.9": ["/root/.pyenv/versions/3.9*/bin/python3.9"], "3.10": ["/root/.pyenv/versions/3.10*/bin/python3.10"]}


def extra_of(module: str) -> str:
    return SERVES[max((k for k in SERVES if module == k or module.startswith(k + ".")), key=len)]


@functools.cache
def _declared() -> dict[str, list[Requirement]]:
    return {k: [Requirement(r) for r in v]
            for k, v in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"].items()}


@functools.cache
def includes(extra: str) -> frozenset[str]:
    """The extras an install of `extra` brings (itself too): pyproject's attribution[...] references followed."""
    declared, out, todo = _declared(), set(), [extra]
    while todo:
        e = todo.pop()
        if e not in out:
            out.add(e)
            todo.extend(x for r in declared.get(e, []) if r.name == "attribution" for x in r.extras)
    return frozenset(out)


@functools.cache
def distributions(extra: str) -> frozenset[str]:
    declared = _declared()
    return frozenset(canonicalize_name(r.name) for e in includes(extra) for r in declared.get(e, [])
                     if r.name != "attribution")


def served_by(pkg: Package, extra: str) -> list[str]:
    """The modules an install of `extra` must import (a __main__ is run, not imported)."""
    return [m for m in pkg.modules if extra_of(m) in includes(extra) and not m.endswith(".__main__")]


def required(pkg: Package, modules: list[str]) -> dict[str, str]:
    """third-party module -> the module that needs it, for the modules that are no command-line edge."""
    out: dict[str, str] = {}
    for m in modules:
        if not m.startswith(EDGES):
            for tp, by in pkg.needs(m).items():
                if tp not in OPTIONAL:
                    out.setdefault(tp, by)
    return out


# -- what pyproject.toml declares, against what the source imports (no install) ------------------------------------


def test_every_module_has_an_extra_that_declares_what_it_imports():
    pkg = Package.from_tree(ROOT)
    dists = {k: {canonicalize_name(d) for d in v} for k, v in packages_distributions().items()}
    problems = []
    for m in pkg.modules:
        extra = extra_of(m)
        for tp, by in sorted(required(pkg, [m]).items()):
            if not dists.get(tp, set()) & distributions(extra):
                problems.append(f"{m} (attribution[{extra}]) needs {tp} (imported by {by}), which [{extra}] does not "
                                f"declare (distribution {', '.join(sorted(dists.get(tp, {'?'})))})")
    assert problems == []


def test_a_command_names_an_extra_that_declares_each_module_it_may_miss():
    pkg = Package.from_tree(ROOT)
    dists = {k: {canonicalize_name(d) for d in v} for k, v in packages_distributions().items()}
    problems = []
    for m in (m for m in pkg.modules if m.startswith(EDGES)):
        for tp, by in sorted(pkg.needs(m).items()):
            if tp in OPTIONAL or dists.get(tp, set()) & distributions(extra_of(m)):
                continue
            if tp not in EXTRA_OF:
                problems.append(f"{m}: a command may import {tp} (through {by}); cli.EXTRA_OF does not name its extra")
            elif not dists.get(tp, set()) & distributions(EXTRA_OF[tp]):
                problems.append(f"cli.EXTRA_OF says {tp} comes with [{EXTRA_OF[tp]}], which does not declare it")
    assert problems == []
    assert {e for e in EXTRA_OF.values()} <= set(EXTRAS)


# -- the wheel, installed ----------------------------------------------------------------------------------------


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
    """The wheel built from this checkout, once per session (and the sdist, for what it must carry)."""
    out = Path(tempfile.mkdtemp(prefix="attribution-dist-"))
    out.chmod(0o755)
    for argv in (["pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                 ["build", "--sdist", "--outdir", str(out), str(ROOT)]):
        r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    yield out
    shutil.rmtree(out, ignore_errors=True)


def wheel_of(dist: Path) -> Path:
    [w] = dist.glob("attribution-*.whl")
    return w


@pytest.fixture(scope="session")
def venv_for(dist):
    """venv_for(python, extra): one clean venv per interpreter and extra for the session, the extra installed from
    the wheel, in a folder any user may enter (pytest's basetemp is 0700 under root)."""
    top = Path(tempfile.mkdtemp(prefix="attribution-pkg-"))
    top.chmod(0o755)
    made: dict[tuple[str, str], Path] = {}

    def make(python: str, extra: str) -> Path:
        if (python, extra) not in made:
            where = top / f"venv-{len(made)}-{extra}"
            r = subprocess.run([python, "-m", "venv", str(where)], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            spec = str(wheel_of(dist)) + ("" if extra == "base" else f"[{extra}]")
            # --prefer-binary: a node's pip should take the newest release with a wheel for its Python
            r = subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "-q", "--prefer-binary",
                                "--find-links", str(dist), spec], capture_output=True, text=True, timeout=1800)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            subprocess.run(["chmod", "-R", "a+rX", str(where)], check=True)
            made[(python, extra)] = where
        return made[(python, extra)]

    yield make
    shutil.rmtree(top, ignore_errors=True)


PROBE = r"""
import importlib, importlib.util, json, sys
want = json.load(sys.stdin)
out = {"imports": [], "missing": []}
for m in want["modules"]:
    try:
        importlib.import_module(m)
    except ImportError as exc:
        out["imports"].append("%s: %s: %s" % (m, type(exc).__name__, exc))
for tp, by in sorted(want["third_party"].items()):
    if importlib.util.find_spec(tp) is None:
        out["missing"].append("%s needs %s, which is not installed" % (by, tp))
print(json.dumps(out))
"""


def probe(venv: Path, modules: list[str], third_party: dict[str, str]) -> dict:
    r = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], input=json.dumps(
        {"modules": modules, "third_party": third_party}), capture_output=True, text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.slow
def test_the_wheel_and_sdist_carry_the_data(dist):
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
    import tarfile

    [sdist] = dist.glob("attribution-*.tar.gz")
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert {"rules/kinds.yaml", "migrations/env.py", "sql/grafana/attribution-fleet.json", "hooks/epilog",
            "tests/incidents/06-ib-link-down/context.yaml", "setup.py"} <= members
    # every module of the checkout is in the wheel
    assert set(Package.from_wheel(wheel_of(dist)).modules) == set(Package.from_tree(ROOT).modules)


@pytest.mark.slow
@pytest.mark.parametrize("extra", EXTRAS)
def test_each_extra_imports_every_module_it_serves(extra, dist, venv_for):
    pkg = Package.from_wheel(wheel_of(dist))
    modules = served_by(pkg, extra)
    venv = venv_for(need_python("3.11", CENTRAL["3.11"]), extra)
    got = probe(venv, modules, required(pkg, modules))
    assert got == {"imports": [], "missing": []}, "\n".join(got["imports"] + got["missing"])


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(NODE))
def test_the_base_install_is_the_node_collector_with_nothing_third_party(version, venv_for, tmp_path):
    """On a node's Python: nothing but attribution (and the venv's pip) installed; the collector answers and, outside
    Slurm, says so in one line and exits 0; `attribution` answers what it can without the central side."""
    venv = venv_for(need_python(version, NODE[version]), "base")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, json; "
                        "print(json.dumps(sorted({d.metadata['Name'].lower() for d in m.distributions()})))"],
                       capture_output=True, text=True, timeout=60)
    assert set(json.loads(r.stdout)) - {"pip", "setuptools"} == {"attribution"}, r.stdout + r.stderr
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C.UTF-8"}
    node = str(venv / "bin" / "attribution-node")
    r = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 0 and r.stdout == "attribution-node 0.1.0\n", r.stdout + r.stderr
    r = subprocess.run([node, "epilog"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == "attribution epilog: not running under Slurm (no SLURM_JOB_ID): nothing to do\n"
    central = str(venv / "bin" / "attribution")
    r = subprocess.run([central, "--help"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 0 and "attribution-node epilog" in r.stdout, r.stdout + r.stderr
    assert f"The central commands need Python 3.11 or newer (this is {version}." in r.stdout
    r = subprocess.run([central, "--version"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 0 and r.stdout == "attribution 0.1.0\n", r.stdout + r.stderr
    r = subprocess.run([central, "rules", "path"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 0 and r.stdout.strip().endswith("attribution/_data/rules"), r.stdout + r.stderr
    r = subprocess.run([central, "db", "upgrade"], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "need Python 3.11 or newer" in r.stderr


@pytest.mark.slow
def test_the_base_install_on_the_central_python_names_the_extra_it_lacks(venv_for, tmp_path):
    venv = venv_for(need_python("3.11", CENTRAL["3.11"]), "base")
    r = subprocess.run([str(venv / "bin" / "attribution"), "diagnose", "x"], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, cwd="/")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "pip install 'attribution[all]'" in r.stderr


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


def smoke(user: str | None, venv: Path, work: Path, pg_url: str) -> None:
    """Every command that reads the shipped data, from an unrelated folder, as `user` (None: root)."""
    bin_ = venv / "bin" / "attribution"
    [incident] = list(venv.glob("lib/python*/site-packages/attribution/_data/incidents/06-ib-link-down"))
    r = as_user(user, [str(bin_), "--version"], work)
    assert r.returncode == 0 and r.stdout.strip() == "attribution 0.1.0", r.stdout + r.stderr
    r = as_user(user, [str(bin_), "--help"], work)
    assert r.returncode == 0 and "alerts" in r.stdout and "diagnose" in r.stdout, r.stdout + r.stderr
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


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(CENTRAL))
def test_the_central_side_from_the_wheel_as_root(version, venv_for, public_dir, pg_url):
    venv = venv_for(need_python(version, CENTRAL[version]), "all")
    smoke(None, venv, work_dir(public_dir), pg_url)


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted(CENTRAL))
def test_the_central_side_from_the_wheel_as_an_ordinary_user(version, venv_for, public_dir, pg_url):
    python = runnable_by("nobody", need_python(version, CENTRAL[version]), public_dir)
    venv = venv_for(python, "all")
    smoke("nobody", venv, work_dir(public_dir, owner=65534), pg_url)
