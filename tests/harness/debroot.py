"""A Debian root with a newer Slurm, built once with debootstrap and cached outside the checkout (stdlib only).

The machines run Debian 12, whose Slurm is 22.05; Debian 13 (trixie) carries Slurm 24.11
(docs/slurm.md). ``ensure_root()`` builds ``<cache>/debian-trixie-slurm-<key>/root`` once:
``debootstrap --variant=minbase trixie`` from the Debian mirror the host's apt sources name, then
``apt-get install --no-install-recommends`` of Slurm (slurmctld, slurmd, slurmdbd, slurm-client, slurmrestd),
munge, MariaDB and the few shared libraries the host's Python needs to run inside the root (the hooks run the
checkout's venv there). The key hashes the suite, the package list and this recipe's version; ``manifest.json``
beside the root records the installed versions and how long the build took. A flock serialises builds.

``in_root(root, path)`` is where a path inside the root is on the host, its links followed inside the root (Debian's
``/usr/sbin/slurmctld`` is an absolute link to ``/etc/alternatives/slurmctld``: followed on the host, it would find
the host's own Slurm, or nothing).

``RootRunner`` runs a command inside the root: a private mount namespace (``unshare --mount``) in which /proc,
/sys, /dev, /tmp and the given host directories are bind-mounted at the same paths, then ``chroot``. Daemons
started this way keep the namespace; nothing stays mounted on the host once they exit.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import apt

__all__ = ["ensure_root", "in_root", "RootRunner", "RootBuildError", "debian_mirror", "python_binds", "CACHE_DIR"]

SUITE = "trixie"
PACKAGES = ["slurmctld", "slurmd", "slurmdbd", "slurm-client", "slurmrestd", "slurm-wlm-jwt-plugin", "munge",
            "mariadb-server", "mariadb-client",
            # what the host's Python (the hooks' venv) links against, beside glibc
            "libssl3t64", "libffi8", "libsqlite3-0", "zlib1g", "libbz2-1.0", "liblzma5"]
RECIPE = "3"  # bump when the build steps change
CACHE_DIR = Path(os.environ.get("ATTRIBUTION_TEST_CACHE", "/var/cache/attribution-tests"))
_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


class RootBuildError(RuntimeError):
    """The Debian root could not be built."""


#: as many links as Linux follows in one lookup (path_resolution(7))
MAX_LINKS = 40


def in_root(root: Path, path: str) -> Path:
    """The host path of ``path`` as a process chrooted at ``root`` sees it: every symbolic link on the way is
    followed inside the root (an absolute target starts again at ``root``; ``..`` never leaves it). A path that
    does not exist is returned as far as it resolved, the rest appended; a loop of links raises RootBuildError."""
    root = Path(root)
    done: list[str] = []
    todo = [p for p in str(path).split("/") if p not in ("", ".")]
    links = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if not here.is_symlink():
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise RootBuildError(f"{path}: more than {MAX_LINKS} symbolic links inside {root}")
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo = [p for p in target.split("/") if p not in ("", ".")] + todo
    return root.joinpath(*done)


def debian_mirror(paths: list[Path] | None = None) -> str:
    """The Debian archive URI of the host's apt sources (deb822 ``*.sources`` or one-line ``*.list``), not the
    security archive."""
    if paths is None:
        d = Path("/etc/apt")
        paths = [d / "sources.list", *sorted((d / "sources.list.d").glob("*.sources")),
                 *sorted((d / "sources.list.d").glob("*.list"))]
    uris: list[str] = []
    for p in paths:
        try:
            text = p.read_text()
        except OSError:
            continue
        if p.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
                if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes").lower() != "no":
                    uris += fields.get("URIs", "").split()
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", line)
                if m:
                    uris.append(m.group(1))
    for uri in uris:
        if re.search(r"/debian/?$", uri) and "security" not in uri:
            return uri.rstrip("/")
    raise RootBuildError(f"no Debian archive in the apt sources ({', '.join(map(str, paths))}): "
                         f"found {uris or 'none'}")


def _key() -> str:
    return hashlib.sha256(json.dumps([SUITE, sorted(PACKAGES), RECIPE]).encode()).hexdigest()[:12]


def _run(cmd: list[str], what: str, timeout: float = 1800, env: dict | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or _ENV,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-30:])
        raise RootBuildError(f"{what}: {' '.join(cmd)} exited {r.returncode}:\n{tail}")
    return r.stdout


def _ensure_debootstrap() -> str:
    path = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.access("/usr/sbin/debootstrap", os.X_OK)
                                           else None)
    if path:
        return path
    r = apt.install(["debootstrap"], extra_env=_ENV)
    if r.returncode != 0:
        raise RootBuildError(f"{r.command} exited {r.returncode}:\n{r.output[-3000:]}")
    return "/usr/sbin/debootstrap"


def ensure_root(cache_dir: Path | None = None, log=None) -> tuple[Path, dict]:
    """The cached root (building it when missing) and its manifest (versions, build seconds, cached or not)."""
    cache_dir = Path(cache_dir or CACHE_DIR)
    home = cache_dir / f"debian-{SUITE}-slurm-{_key()}"
    root, manifest_path = home / "root", home / "manifest.json"
    cache_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(cache_dir / f".build-{_key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second session waits for the first build
        if manifest_path.is_file() and in_root(root, "/usr/sbin/slurmctld").exists():
            manifest = json.loads(manifest_path.read_text())
            manifest["cached"] = True
            manifest["ensure_seconds"] = round(time.monotonic() - t0, 2)
            return root, manifest
        if os.geteuid() != 0:
            raise RootBuildError("building the Debian root needs root (debootstrap, chroot)")
        shutil.rmtree(home, ignore_errors=True)
        tmp = cache_dir / f".building-{_key()}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        steps: dict[str, float] = {}
        try:
            s = time.monotonic()
            deboot = _ensure_debootstrap()
            mirror = debian_mirror()
            steps["debootstrap_install_s"] = round(time.monotonic() - s, 1)
            s = time.monotonic()
            _run(["nice", deboot, "--variant=minbase", SUITE, str(tmp / "root"), mirror], "debootstrap")
            steps["debootstrap_s"] = round(time.monotonic() - s, 1)
            r = tmp / "root"
            (r / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")  # no service starts in the root
            (r / "usr/sbin/policy-rc.d").chmod(0o755)
            shutil.copy("/etc/hosts", r / "etc/hosts")  # the Slurm tools need "localhost" to resolve
            runner = RootRunner(r, binds=[])
            s = time.monotonic()
            _run(runner.argv(["apt-get", "update"]), "apt-get update in the root", env=_ENV)
            _run(runner.argv(["nice", "apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]),
                 "apt-get install in the root", env=_ENV)
            _run(runner.argv(["apt-get", "clean"]), "apt-get clean", env=_ENV)
            steps["packages_s"] = round(time.monotonic() - s, 1)
            versions = {}
            out = _run(runner.argv(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"]), "dpkg-query", env=_ENV)
            for line in out.splitlines():
                name, _, ver = line.partition(" ")
                if name in PACKAGES or name.startswith(("slurm", "munge", "libslurm", "mariadb")):
                    versions[name] = ver
            manifest = {"suite": SUITE, "mirror": mirror, "packages": versions, "recipe": RECIPE, "key": _key(),
                        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": steps,
                        "build_seconds": round(time.monotonic() - t0, 1)}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
            tmp.rename(home)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        manifest["cached"] = False
        manifest["ensure_seconds"] = round(time.monotonic() - t0, 2)
        if log:
            log(f"built {home} in {manifest['build_seconds']} s")
        return root, manifest


def python_binds() -> list[Path]:
    """Host directories (and files) the running Python needs, so that a venv made from it runs inside a root."""
    base = Path(sys.base_prefix).resolve()
    exe = Path(os.path.realpath(sys.executable))
    if base != Path("/usr"):
        return [base]  # e.g. pyenv's /root/.pyenv/versions/3.11.7: interpreter, libpython and stdlib
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return [exe, Path("/usr/lib") / ver]


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


class RootRunner:
    """Builds argument lists that run a command inside ``root`` with host paths bind-mounted at the same place."""

    BASE_BINDS = ("/proc", "/sys", "/dev", "/tmp")

    def __init__(self, root: Path, binds: list[Path | str]) -> None:
        self.root = Path(root).resolve()
        binds = [str(Path(b)) for b in binds]
        # a path inside another bind (the checkout under /tmp, say) is already there
        covered = (*self.BASE_BINDS, *binds)
        self.binds = list(dict.fromkeys(b for b in binds
                                        if not any(b != c and b.startswith(c.rstrip("/") + "/") for c in covered)
                                        and b not in self.BASE_BINDS))

    def prepare(self) -> None:
        """Create the mount points (idempotent)."""
        for b in (*self.BASE_BINDS, *self.binds):
            target = Path(str(self.root) + b)
            if Path(b).is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    target.touch()

    def argv(self, cmd: list[str], cwd: str | None = None) -> list[str]:
        """Inside the root, PATH is the standard one: the host's (with wrappers that enter the root) means nothing
        there."""
        self.prepare()
        script = ('set -e; R=$1; W=$2; shift 2; while [ "$1" != -- ]; do mount --rbind "$1" "$R$1"; shift; done; '
                  'shift; exec /usr/sbin/chroot "$R" /bin/sh -c \'cd "$0" 2>/dev/null || cd /; '
                  'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin exec "$@"\' "$W" "$@"')
        return ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh",
                str(self.root), cwd or "/", *self.BASE_BINDS, *self.binds, "--", *[str(c) for c in cmd]]

    def wrapper(self, path: Path, command: str) -> Path:
        """A host script at ``path`` that runs ``command`` (e.g. /usr/bin/sacct) inside the root with its own
        arguments, from the caller's directory: what a host without that Slurm calls instead."""
        argv = self.argv(["@CMD@"], "@CWD@")
        words = [('"$PWD"' if a == "@CWD@" else _quote(command) + ' "$@"' if a == "@CMD@" else _quote(a))
                 for a in argv]
        path.write_text("#!/bin/sh\nexec " + " ".join(words) + "\n")
        path.chmod(0o755)
        return path


if __name__ == "__main__":  # python -m tests.harness.debroot: build (or show) the cached root
    root, manifest = ensure_root(log=print)
    print(root)
    print(json.dumps(manifest, indent=1))
