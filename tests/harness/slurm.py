"""A real, throw-away Slurm cluster for tests (stdlib only): the host's Slurm 22.05, or a newer Slurm inside a
Debian root (``root=``, see tests/harness/debroot.py: 24.11 from Debian 13).

Everything lives under ``base_dir``: a private munged, one slurmctld and two
``slurmd -N nodeX`` daemons on one machine (the "multiple slurmd" mode), each
node with two fake GPUs (GRES ``gpu`` on mknod'ed char devices), and optionally
MariaDB + slurmdbd so that ``sacct`` works.  Needs root and Debian/Ubuntu
packages (``install()`` apt-gets them).  See ``tests/harness/conftest_slurm.md``.

Typical use::

    cluster = SlurmCluster(tmp, epilog="/path/epilog.sh", epilog_slurmctld=None, prolog=None)
    cluster.install()
    cluster.start()
    try:
        jid = cluster.sbatch(["-N2", "--gres=gpu:2", "--wrap", "exit 3"])
        assert cluster.wait_job(jid) == "FAILED"
    finally:
        cluster.stop()

The ports are fixed (configurable). ``start()`` takes a machine-wide lock per port
(flock on ``/tmp/attribution-slurm-port-<port>.lock``) and holds it until ``stop()``:
two test runs on one machine wait for each other instead of failing.
Hooks (Prolog/Epilog/EpilogSlurmctld) run as root with an environment that Slurm
builds from scratch: no PATH, and none of ``extra_env``.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

from . import apt
from .debroot import RootRunner, in_root

__all__ = ["SlurmCluster", "SlurmHarnessError", "LOCK_DIR"]

LOCK_DIR = Path(os.environ.get("ATTRIBUTION_TEST_LOCK_DIR", "/tmp"))

SLURM_PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
ACCOUNTING_PACKAGES = ["slurmdbd", "mariadb-server"]

# Binaries whose presence means the packages above are installed.
_SLURM_BINARIES = ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/bin/scontrol",
                   "/usr/bin/sinfo", "/usr/sbin/munged", "/usr/bin/munge"]
_ACCOUNTING_BINARIES = ["/usr/sbin/slurmdbd", "/usr/bin/sacct", "/usr/bin/sacctmgr", "/usr/sbin/mariadbd",
                        "/usr/bin/mariadb-install-db", "/usr/bin/mariadb", "/usr/bin/mariadb-admin"]

# Job states in which the job (or its epilogs) is still going.
_ACTIVE_STATES = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED",
                  "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}

# Keep the throw-away MariaDB small (the defaults create a ~100 MB redo log).
_MARIADB_SMALL = ["--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M", "--skip-log-bin"]

_DB_USER = "slurm"
_DB_PASS = "slurmpw"
_DB_NAME = "slurm_acct_db"


class SlurmHarnessError(RuntimeError):
    """The test cluster could not be installed, started or queried."""


class SlurmCluster:
    """A two-node Slurm cluster under ``base_dir``; see the module docstring.

    Positional/keyword arguments as in the project's test brief; the keyword-only
    ones after ``*`` tune ports and config and rarely need changing.
    """

    def __init__(
        self,
        base_dir: Path,
        epilog: str | None = None,
        epilog_slurmctld: str | None = None,
        prolog: str | None = None,
        prolog_epilog_timeout: int = 30,
        with_accounting: bool = False,
        extra_env: dict | None = None,
        *,
        cluster_name: str = "attrtest",
        slurmctld_port: int = 16817,
        slurmdbd_port: int = 16818,
        node_ports: tuple[int, ...] = (17001, 17002),
        mysql_port: int = 13306,
        gpus_per_node: int = 2,
        min_job_age: int = 900,
        prolog_flags: str | None = None,
        extra_slurm_conf: list[str] | None = None,
        debug_level: str = "info",
        start_timeout: float = 60.0,
        root: Path | None = None,
        binds: list[Path] | None = None,
        with_restd: bool = False,
        restd_port: int = 16820,
        lock_timeout: float = 3600.0,
    ) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.epilog = str(epilog) if epilog is not None else None
        self.epilog_slurmctld = str(epilog_slurmctld) if epilog_slurmctld is not None else None
        self.prolog = str(prolog) if prolog is not None else None
        self.prolog_epilog_timeout = int(prolog_epilog_timeout)
        self.with_accounting = bool(with_accounting)
        self.extra_env = {str(k): str(v) for k, v in (extra_env or {}).items()}
        self.cluster_name = cluster_name
        self.slurmctld_port = slurmctld_port
        self.slurmdbd_port = slurmdbd_port
        self.node_ports = tuple(node_ports)
        self.mysql_port = mysql_port
        self.gpus_per_node = gpus_per_node
        self.min_job_age = min_job_age
        self.prolog_flags = prolog_flags
        self.extra_slurm_conf = list(extra_slurm_conf or [])
        self.debug_level = debug_level
        self.start_timeout = start_timeout
        # A Debian root holding another Slurm: every daemon and client command runs inside it (chroot in a private
        # mount namespace with /tmp, /proc, /sys, /dev and ``binds`` mounted at the same paths).
        self.root = Path(root).resolve() if root else None
        self.runner = RootRunner(self.root, binds or []) if self.root else None
        self.with_restd = bool(with_restd)
        self.restd_port = restd_port
        self.lock_timeout = lock_timeout
        self.version: str | None = None             # "24.11.5", read from slurmctld -V by start()
        self._locks: list = []
        self._restd_proc: subprocess.Popen | None = None

        self.nodes = [f"node{i + 1}" for i in range(len(self.node_ports))]
        b = self.base_dir
        self.conf_path = b / "slurm.conf"
        self.gres_conf_path = b / "gres.conf"
        self.slurmdbd_conf_path = b / "slurmdbd.conf"
        self.munge_dir = b / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        self.state_dir = b / "state"
        self.spool_dir = b / "spool"
        self.log_dir = b / "log"
        self.run_dir = b / "run"
        self.dev_dir = b / "dev"
        self.work_dir = b / "work"          # cwd of client commands, so slurm-%j.out lands here
        self.mysql_dir = b / "mysql"
        self.mysql_socket = b / "run" / "mysql.sock"
        self.jobcomp_path = self.log_dir / "jobcomp.txt"
        self.cgroup_conf_path = b / "cgroup.conf"
        self.jwt_key = b / "jwt.key"
        self.munge_socket = self._munge_socket_path()

        self._mariadb_proc: subprocess.Popen | None = None
        self.install_seconds: float | None = None   # set by install(): 0.0 when nothing was installed
        self.start_seconds: float | None = None     # set by start()

    # ------------------------------------------------------------------ paths
    def _munge_socket_path(self) -> Path:
        sock = self.munge_dir / "munge.socket"
        if len(str(sock)) < 100:                    # AF_UNIX path limit is 108 bytes
            return sock
        short = Path("/tmp") / f"attrtest-munge-{os.getpid()}-{abs(hash(str(self.base_dir))) % 10**8}"
        return short / "munge.socket"

    def _pid_files(self) -> list[tuple[Path, str]]:
        """(pid file, expected program name) for every daemon, stop order irrelevant."""
        files = [(self.run_dir / f"slurmd-{n}.pid", "slurmd") for n in self.nodes]
        files += [(self.run_dir / "slurmctld.pid", "slurmctld"),
                  (self.run_dir / "slurmdbd.pid", "slurmdbd"),
                  (self.run_dir / "mariadb.pid", "mariadbd"),
                  (self.run_dir / "slurmrestd.pid", "slurmrestd"),
                  (self.munge_dir / "munged.pid", "munged")]
        return files

    # ----------------------------------------------------------- commands
    def argv(self, cmd: list[str], cwd: Path | str | None = None) -> list[str]:
        """The argument list that runs ``cmd`` against this cluster's Slurm (inside the root when there is one)."""
        cmd = [str(c) for c in cmd]
        if self.runner is None:
            return cmd
        return self.runner.argv(cmd, str(cwd) if cwd else None)

    def _host_path(self, path: str) -> str:
        """Where ``path`` of this cluster's Slurm is on the host: inside the root, its links followed there."""
        return str(in_root(self.root, path)) if self.root else path

    @property
    def ports(self) -> list[int]:
        ports = [self.slurmctld_port, *self.node_ports]
        if self.with_accounting:
            ports += [self.slurmdbd_port, self.mysql_port]
        if self.with_restd:
            ports.append(self.restd_port)
        return sorted(ports)

    # ----------------------------------------------------------- environment
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands: os.environ minus any inherited
        SLURM_* variables, plus SLURM_CONF and ``extra_env``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        env.update(self.extra_env)
        env["SLURM_CONF"] = str(self.conf_path)
        return env

    # --------------------------------------------------------------- install
    def missing_binaries(self) -> list[str]:
        need = list(_SLURM_BINARIES)
        if self.with_accounting:
            need += _ACCOUNTING_BINARIES
        if self.with_restd:
            need.append("/usr/sbin/slurmrestd")
        return [p for p in need if not os.access(self._host_path(p), os.X_OK)]

    def install(self) -> float:
        """apt-get install the packages unless their binaries already exist.
        Runs ``apt-get update`` only if the first install attempt fails.
        Returns (and stores in ``install_seconds``) the time spent."""
        t0 = time.monotonic()
        if not self.missing_binaries():
            self.install_seconds = 0.0
            return 0.0
        if self.root is not None:
            raise SlurmHarnessError(f"{self.root} lacks {self.missing_binaries()}: rebuild it "
                                    f"(tests/harness/debroot.py)")
        if os.geteuid() != 0:
            raise SlurmHarnessError(f"Slurm packages missing ({self.missing_binaries()}) and not root")
        pkgs = SLURM_PACKAGES + (ACCOUNTING_PACKAGES if self.with_accounting else [])
        r = apt.install(pkgs)
        if r.returncode != 0:
            raise SlurmHarnessError(f"{r.command} failed (rc {r.returncode}) even after apt-get update:\n"
                                    f"{_tail_text(r.output, 30)}")
        if self.missing_binaries():
            raise SlurmHarnessError(f"still missing after install: {self.missing_binaries()}")
        self.install_seconds = time.monotonic() - t0
        return self.install_seconds

    # ----------------------------------------------------------------- start
    def start(self) -> float:
        """Start munged (+ MariaDB/slurmdbd), slurmctld and the slurmds; wait
        until every node is idle.  On failure, stops whatever was started and
        raises SlurmHarnessError with the tail of the logs.  Returns (and stores
        in ``start_seconds``) the time taken."""
        if os.geteuid() != 0:
            raise SlurmHarnessError("SlurmCluster must run as root (SlurmUser=root, mknod, munged)")
        missing = self.missing_binaries()
        if missing:
            raise SlurmHarnessError(f"missing binaries {missing}: call install() first")
        t_lock = time.monotonic()
        self._lock_ports()
        self.lock_wait_seconds = time.monotonic() - t_lock
        t0 = time.monotonic()
        try:
            self._check_ports_free()
            out = self._check(["/usr/sbin/slurmctld", "-V"], "slurmctld -V").stdout
            m = re.search(r"(\d+\.\d+\.\d+)", out)
            self.version = m.group(1) if m else None
            self._prepare_dirs()
            self._write_configs()
            self._start_munged()
            if self.with_accounting:
                self._start_mariadb()
                self._start_slurmdbd()
            self._check(["/usr/sbin/slurmctld", "-f", str(self.conf_path), "-c"], "slurmctld")
            for node in self.nodes:
                self._check(["/usr/sbin/slurmd", "-f", str(self.conf_path), "-N", node], f"slurmd {node}")
            self._wait_nodes_idle(self.start_timeout - (time.monotonic() - t0))
            if self.with_restd:
                self._start_restd()
        except BaseException as exc:
            logs = self.log_tail()
            self.stop()
            if isinstance(exc, SlurmHarnessError):
                raise SlurmHarnessError(f"{exc}\n--- log tail ---\n{logs}") from None
            raise
        self.start_seconds = time.monotonic() - t0
        return self.start_seconds

    def _lock_ports(self) -> None:
        """Hold an exclusive flock per port (sorted: no deadlock between two clusters sharing some ports) until
        stop(); another run on this machine using these ports waits here."""
        if self._locks:
            return
        deadline = time.monotonic() + self.lock_timeout
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        for port in self.ports:
            f = open(LOCK_DIR / f"attribution-slurm-port-{port}.lock", "a+")
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        f.close()
                        self._unlock_ports()
                        raise SlurmHarnessError(f"port {port} locked by another test cluster for "
                                                f"{self.lock_timeout:.0f} s ({f.name})") from None
                    time.sleep(0.5)
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()} {self.base_dir}\n")
            f.flush()
            self._locks.append(f)

    def _unlock_ports(self) -> None:
        for f in self._locks:
            try:
                fcntl.flock(f, fcntl.LOCK_UN)
            finally:
                f.close()
        self._locks = []

    def _busy_ports(self) -> list[int]:
        busy = []
        for port in self.ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.2)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    busy.append(port)
        return busy

    def _check_ports_free(self) -> None:
        busy = self._busy_ports()
        if busy:
            # this run holds every port's lock, so no live test cluster owns them: a daemon of ours still listening
            # is left from a run that was killed before its stop() (a Ctrl-C, a CI timeout); it is ended, and
            # anything else on the port is reported
            stale = _stale_daemons(busy)
            for pid in stale:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            deadline = time.monotonic() + 10
            while stale and any(_alive(pid) for pid in stale) and time.monotonic() < deadline:
                time.sleep(0.1)
            busy = self._busy_ports()
        if busy:
            raise SlurmHarnessError(
                f"ports {busy} already in use: another test cluster running? "
                f"(stop it or pass other ports to SlurmCluster)")

    def _prepare_dirs(self) -> None:
        b = self.base_dir
        for d in (b, self.munge_dir, self.munge_socket.parent, self.state_dir, self.spool_dir,
                  self.log_dir, self.run_dir, self.dev_dir, self.work_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)
        # munged refuses a socket whose directory (and ancestors) are not o+x,
        # and the slurm/munge users must be able to traverse to the configs.
        for anc in [self.base_dir, *self.base_dir.parents, self.munge_socket.parent]:
            mode = anc.stat().st_mode
            if (mode & (stat.S_IXOTH | stat.S_IXGRP)) != (stat.S_IXOTH | stat.S_IXGRP):  # munged wants both
                os.chmod(anc, stat.S_IMODE(mode) | stat.S_IXOTH | stat.S_IXGRP)
        # Fake GPUs: char devices 1,3 (same as /dev/null).
        for i in range(self.gpus_per_node * len(self.nodes)):
            dev = self.dev_dir / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        if not self.munge_key.exists():
            fd = os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))           # what `mungekey -c` writes, without its ≈1 s cost
        os.chmod(self.munge_key, 0o600)
        if self.with_restd and not self.jwt_key.exists():
            fd = os.open(self.jwt_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(64))             # HS256 key for auth/jwt (slurmctld, slurmdbd, slurmrestd)

    def _write_configs(self) -> None:
        ncpu = os.cpu_count() or 1
        lines = [
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"SlurmctldPort={self.slurmctld_port}",
            f"StateSaveLocation={self.state_dir}",
            f"SlurmdSpoolDir={self.spool_dir}/%n",
            f"SlurmctldPidFile={self.run_dir}/slurmctld.pid",
            f"SlurmdPidFile={self.run_dir}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.log_dir}/slurmctld.log",
            f"SlurmdLogFile={self.log_dir}/slurmd-%n.log",
            f"SlurmctldDebug={self.debug_level}",
            f"SlurmdDebug={self.debug_level}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp_path}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            f"MinJobAge={self.min_job_age}",
            "MpiDefault=none",
            "MailProg=/bin/true",
            f"PrologEpilogTimeout={self.prolog_epilog_timeout}",
            "GresTypes=gpu",
        ]
        if self.with_accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={self.slurmdbd_port}",
                # Without this, slurmctld/sacctmgr talk to the default munge socket and hang.
                f"AccountingStoragePass={self.munge_socket}",
            ]
        else:
            lines.append("AccountingStorageType=accounting_storage/none")
        if self.prolog:
            lines.append(f"Prolog={self.prolog}")
        if self.prolog_flags:
            lines.append(f"PrologFlags={self.prolog_flags}")
        if self.epilog:
            lines.append(f"Epilog={self.epilog}")
        if self.epilog_slurmctld:
            lines.append(f"EpilogSlurmctld={self.epilog_slurmctld}")
        if self.with_restd:
            lines += ["AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={self.jwt_key}"]
        lines += self.extra_slurm_conf
        for node, port in zip(self.nodes, self.node_ports):
            lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={ncpu} RealMemory=1000 Gres=gpu:{self.gpus_per_node} State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        _write(self.conf_path, "\n".join(lines) + "\n", 0o644)

        gres = ["AutoDetect=off"]
        g = self.gpus_per_node
        for i, node in enumerate(self.nodes):
            lo, hi = i * g, i * g + g - 1
            files = f"{self.dev_dir}/nvidia{lo}" if g == 1 else f"{self.dev_dir}/nvidia[{lo}-{hi}]"
            gres.append(f"NodeName={node} Name=gpu File={files}")
        _write(self.gres_conf_path, "\n".join(gres) + "\n", 0o644)
        if self.major_minor >= (23, 11):
            # slurmd 24.11 refuses to start without a mounted cgroup fs, whatever the proctrack/task plugins
            # (docs/slurm.md): no cgroup plugin at all.
            _write(self.cgroup_conf_path, "CgroupPlugin=disabled\n", 0o644)

        if self.with_accounting:
            # slurmdbd reads dirname($SLURM_CONF)/slurmdbd.conf and refuses it unless 0600.
            _write(self.slurmdbd_conf_path, "\n".join([
                "AuthType=auth/munge",
                f"AuthInfo=socket={self.munge_socket}",
                "DbdHost=localhost",
                f"DbdPort={self.slurmdbd_port}",
                "SlurmUser=root",
                f"PidFile={self.run_dir}/slurmdbd.pid",
                f"LogFile={self.log_dir}/slurmdbd.log",
                f"DebugLevel={self.debug_level}",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",            # not "localhost": that would use the system mysqld socket
                f"StoragePort={self.mysql_port}",
                f"StorageUser={_DB_USER}",
                f"StoragePass={_DB_PASS}",
                f"StorageLoc={_DB_NAME}",
                *(["AuthAltTypes=auth/jwt", f"AuthAltParameters=jwt_key={self.jwt_key}"] if self.with_restd else []),
            ]) + "\n", 0o600)

    @property
    def major_minor(self) -> tuple[int, int]:
        m = re.match(r"(\d+)\.(\d+)", self.version or "")
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    def _daemon_env(self) -> dict[str, str]:
        env = self.env()
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    def _check(self, cmd: list[str], what: str, timeout: float = 30) -> subprocess.CompletedProcess:
        try:
            r = subprocess.run(self.argv(cmd, self.log_dir if self.log_dir.is_dir() else None),
                               env=self._daemon_env(), cwd=self.log_dir if self.log_dir.is_dir() else None,
                               capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise SlurmHarnessError(f"{what}: {' '.join(cmd)} timed out after {timeout} s") from exc
        if r.returncode != 0:
            raise SlurmHarnessError(f"{what}: {' '.join(cmd)} exited {r.returncode}: "
                                    f"{(r.stdout + r.stderr).strip()[-2000:]}")
        return r

    def _start_munged(self) -> None:
        m = self.munge_dir
        self._check(["/usr/sbin/munged", f"--socket={self.munge_socket}", f"--key-file={self.munge_key}",
                     f"--log-file={m}/munged.log", f"--pid-file={m}/munged.pid",
                     f"--seed-file={m}/munged.seed"], "munged")
        deadline = time.monotonic() + 10
        while True:
            r = subprocess.run(self.argv(["/usr/bin/munge", "-S", str(self.munge_socket), "-n"]),
                               capture_output=True, timeout=10)
            if r.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise SlurmHarnessError(f"munged not answering on {self.munge_socket}: {r.stderr!r}")
            time.sleep(0.05)

    def _mysql(self, sql: str) -> subprocess.CompletedProcess:
        return self._check(["/usr/bin/mariadb", "--no-defaults", "-S", str(self.mysql_socket),
                            "-uroot", "-e", sql], "mariadb client")

    def _start_mariadb(self) -> None:
        if not (self.mysql_dir / "mysql").is_dir():
            self.mysql_dir.mkdir(parents=True, exist_ok=True)
            self._check(["/usr/bin/mariadb-install-db", "--no-defaults", "--user=root",
                         f"--datadir={self.mysql_dir}", "--auth-root-authentication-method=normal",
                         "--skip-test-db", *_MARIADB_SMALL], "mariadb-install-db", timeout=120)
        log = open(self.log_dir / "mariadb.out", "ab")
        try:
            self._mariadb_proc = subprocess.Popen(self.argv(
                ["/usr/sbin/mariadbd", "--no-defaults", "--user=root", f"--datadir={self.mysql_dir}",
                 f"--socket={self.mysql_socket}", f"--pid-file={self.run_dir}/mariadb.pid",
                 "--bind-address=127.0.0.1", f"--port={self.mysql_port}",
                 f"--log-error={self.log_dir}/mariadb.err",
                 "--innodb-flush-log-at-trx-commit=0", *_MARIADB_SMALL]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env=self._daemon_env())
        finally:
            log.close()
        deadline = time.monotonic() + 30
        while True:
            r = subprocess.run(self.argv(["/usr/bin/mariadb-admin", "--no-defaults", "-S", str(self.mysql_socket),
                                          "-uroot", "ping"]), capture_output=True, timeout=10)
            if r.returncode == 0 and (self.run_dir / "mariadb.pid").exists():
                break
            if self._mariadb_proc.poll() is not None:
                raise SlurmHarnessError(f"mariadbd exited with {self._mariadb_proc.returncode}")
            if time.monotonic() > deadline:
                raise SlurmHarnessError("mariadbd did not answer within 30 s")
            time.sleep(0.05)
        self._mysql(f"CREATE DATABASE IF NOT EXISTS {_DB_NAME}; "
                    f"CREATE USER IF NOT EXISTS '{_DB_USER}'@'127.0.0.1' IDENTIFIED BY '{_DB_PASS}'; "
                    f"GRANT ALL ON {_DB_NAME}.* TO '{_DB_USER}'@'127.0.0.1';")

    def _start_slurmdbd(self) -> None:
        self._check(["/usr/sbin/slurmdbd"], "slurmdbd")
        deadline = time.monotonic() + 30
        while True:
            try:
                r = self.run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], timeout=10)
                if r.returncode == 0:
                    break
                err = r.stderr
            except subprocess.TimeoutExpired:
                err = "timeout"
            if time.monotonic() > deadline:
                raise SlurmHarnessError(f"slurmdbd not answering: {err}")
            time.sleep(0.1)
        if self.cluster_name not in r.stdout.split():
            r = self.run(["sacctmgr", "-i", "add", "cluster", self.cluster_name], timeout=30)
            if r.returncode != 0 and "already exists" not in (r.stdout + r.stderr):
                raise SlurmHarnessError(f"sacctmgr add cluster failed: {r.stdout}{r.stderr}")

    def _start_restd(self) -> None:
        """slurmrestd on 127.0.0.1:<restd_port>, JWT only. It stays in the foreground: we keep its process.
        It runs as nobody: slurmrestd running as root or SlurmUser rejects every token ("Rejecting thread config
        token for user ...", measured on 24.11.5), and SLURM_JWT=daemon makes it speak auth/jwt to slurmctld with
        each client's token (without it, the munge plugin refuses every token the same way)."""
        env = self._daemon_env()
        env["SLURM_JWT"] = "daemon"
        # nobody cannot traverse pytest's 0700 /tmp/pytest-of-root (which any new pytest session resets):
        # it reads a copy of the configuration from a directory of its own (the port lock makes it ours)
        conf_dir = self.restd_conf_dir
        shutil.rmtree(conf_dir, ignore_errors=True)
        conf_dir.mkdir(mode=0o755, parents=True)
        for f in (self.conf_path, self.gres_conf_path, self.cgroup_conf_path):
            if f.exists():
                shutil.copy(f, conf_dir / f.name)
                os.chmod(conf_dir / f.name, 0o644)
        log = open(self.log_dir / "slurmrestd.log", "ab")
        try:
            self._restd_proc = subprocess.Popen(
                self.argv(["/usr/sbin/slurmrestd", "-f", str(conf_dir / "slurm.conf"), "-a", "rest_auth/jwt",
                           "-u", "nobody", "-g", "nogroup", f"127.0.0.1:{self.restd_port}"]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)
        finally:
            log.close()
        (self.run_dir / "slurmrestd.pid").write_text(f"{self._restd_proc.pid}\n")
        deadline = time.monotonic() + 30
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", self.restd_port)) == 0:
                    return
            if self._restd_proc.poll() is not None:
                raise SlurmHarnessError(f"slurmrestd exited with {self._restd_proc.returncode}")
            if time.monotonic() > deadline:
                raise SlurmHarnessError("slurmrestd did not listen within 30 s")
            time.sleep(0.05)

    @property
    def restd_conf_dir(self) -> Path:
        return Path("/tmp") / f"attribution-slurmrestd-{self.restd_port}"

    @property
    def restd_url(self) -> str:
        return f"http://127.0.0.1:{self.restd_port}"

    def token(self, user: str = "root", lifespan: int = 3600) -> str:
        """A JWT for slurmrestd from ``scontrol token`` (needs auth/jwt, i.e. with_restd=True)."""
        r = self.run(["scontrol", "token", f"username={user}", f"lifespan={lifespan}"])
        if r.returncode != 0 or "SLURM_JWT=" not in r.stdout:
            raise SlurmHarnessError(f"scontrol token failed (rc {r.returncode}): {r.stdout}{r.stderr}")
        return r.stdout.split("SLURM_JWT=", 1)[1].split()[0]

    def node_states(self) -> dict[str, str]:
        """{node: long state} from ``sinfo -N``, e.g. {'node1': 'idle', 'node2': 'drained'}."""
        r = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10)
        if r.returncode != 0:
            return {}
        out = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def _wait_nodes_idle(self, timeout: float, nodes: list[str] | None = None) -> None:
        nodes = nodes or self.nodes
        deadline = time.monotonic() + max(timeout, 1.0)
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            try:
                states = self.node_states()
            except subprocess.TimeoutExpired:
                states = {}
            if all(states.get(n) == "idle" for n in nodes):
                return
            for pidfile, name in self._pid_files():
                if name in ("slurmctld", "slurmd") and pidfile.exists() and not _alive(_read_pid(pidfile)):
                    raise SlurmHarnessError(f"{name} ({pidfile.name}) died during start-up")
            time.sleep(0.1)
        raise SlurmHarnessError(f"nodes not idle after {timeout:.0f} s: {states or 'sinfo failed'}")

    # ------------------------------------------------------------------ stop
    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every daemon listed in our pid files at once, wait for them
        to exit (SIGKILL after ``timeout``).  Safe to call repeatedly.
        Jobs still running are cancelled first, so no slurmstepd outlives the cluster."""
        ctld = _read_pid(self.run_dir / "slurmctld.pid")
        if ctld and _alive(ctld):
            try:
                self.run(["scancel", "--full", "--state=RUNNING,PENDING,SUSPENDED", "--quiet"], timeout=10)
                end = time.monotonic() + 10
                while time.monotonic() < end and self.run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.strip():
                    time.sleep(0.2)
            except (OSError, subprocess.SubprocessError):
                pass  # stopping must not fail; the daemons are killed below regardless
        pids: list[int] = []
        for pidfile, name in self._pid_files():
            pid = _read_pid(pidfile)
            if pid and _alive(pid) and _is_program(pid, name):
                try:
                    os.kill(pid, signal.SIGTERM)
                    pids.append(pid)
                except ProcessLookupError:
                    pass
        for proc in (self._mariadb_proc, self._restd_proc):
            if proc is not None and proc.poll() is None and proc.pid not in pids:
                proc.terminate()
                pids.append(proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in (self._mariadb_proc, self._restd_proc):
                if proc is not None:
                    proc.poll()                      # reap our own children
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.05)
        else:
            for p in pids:
                if _alive(p):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
        if self._mariadb_proc is not None:
            try:
                self._mariadb_proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self._mariadb_proc = None
        if self._restd_proc is not None:
            try:
                self._restd_proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self._restd_proc = None
        if self.with_restd:
            shutil.rmtree(self.restd_conf_dir, ignore_errors=True)
        if self.munge_socket.parent != self.munge_dir:
            shutil.rmtree(self.munge_socket.parent, ignore_errors=True)
        self._unlock_ports()

    def remove_database(self) -> None:
        """Delete the MariaDB data dir (tens of MB) after stop(); the next
        start() then begins with an empty accounting database."""
        if self._mariadb_proc is not None or _alive(_read_pid(self.run_dir / "mariadb.pid")):
            raise SlurmHarnessError("remove_database() needs a stopped cluster")
        shutil.rmtree(self.mysql_dir, ignore_errors=True)

    def __enter__(self) -> "SlurmCluster":
        self.install()
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ client API
    def run(self, args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a client command (sbatch, scontrol, sinfo, sacct, ...) against this
        cluster, from ``work_dir``.  Text output captured; never raises on rc."""
        return subprocess.run(self.argv(args, self.work_dir), env=self.env(), cwd=self.work_dir,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def sbatch(self, args: list[str]) -> str:
        """``sbatch --parsable *args``; returns the job id."""
        r = self.run(["sbatch", "--parsable", *args])
        if r.returncode != 0:
            raise SlurmHarnessError(f"sbatch {args} failed (rc {r.returncode}): {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def job_info(self, job_id: str) -> dict[str, str] | None:
        """``scontrol show job -o`` as a dict, or None once slurmctld forgot the job."""
        r = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=15)
        if r.returncode != 0 or "JobId=" not in r.stdout:
            return None
        return _parse_kv(r.stdout.splitlines()[0])

    def jobcomp_record(self, job_id: str) -> dict[str, str] | None:
        """The job's line in the jobcomp/filetxt file, as a dict (last one wins)."""
        try:
            text = self.jobcomp_path.read_text()
        except FileNotFoundError:
            return None
        found = None
        for line in text.splitlines():
            if line.startswith(f"JobId={job_id} "):
                found = _parse_kv(line)
        return found

    def wait_job(self, job_id: str, timeout: float = 120) -> str:
        """Poll until the job is no longer PENDING/RUNNING/COMPLETING (so node
        epilogs have finished); returns the final state, e.g. "FAILED"."""
        deadline = time.monotonic() + timeout
        state = "UNKNOWN"
        while time.monotonic() < deadline:
            info = self.job_info(job_id)
            if info is not None:
                state = info.get("JobState", "UNKNOWN")
                if state not in _ACTIVE_STATES:
                    return state
            else:
                rec = self.jobcomp_record(job_id)
                if rec is not None:
                    return rec.get("JobState", "UNKNOWN")
            time.sleep(0.1)
        raise SlurmHarnessError(f"job {job_id} still {state} after {timeout} s")

    def hostnames(self, hostlist: str) -> list[str]:
        """Expand a Slurm hostlist (``node[1-2]``) with ``scontrol show hostnames``."""
        r = self.run(["scontrol", "show", "hostnames", hostlist], timeout=10)
        if r.returncode != 0:
            raise SlurmHarnessError(f"cannot expand {hostlist!r}: {r.stderr.strip()}")
        return r.stdout.split()

    def drained_nodes(self) -> list[str]:
        """Nodes that ``sinfo -R`` lists (drained/draining/down with a reason), expanded."""
        r = self.run(["sinfo", "-R", "-h", "-o", "%N %E"], timeout=10)
        if r.returncode != 0:
            raise SlurmHarnessError(f"sinfo -R failed: {r.stderr.strip()}")
        nodes: list[str] = []
        for line in r.stdout.splitlines():
            hostlist = line.split(" ", 1)[0].strip()
            if hostlist:
                nodes += [n for n in self.hostnames(hostlist) if n not in nodes]
        return sorted(nodes)

    def resume(self, node: str, timeout: float = 10) -> None:
        """``scontrol update nodename=NODE state=resume`` and wait until it is idle."""
        r = self.run(["scontrol", "update", f"nodename={node}", "state=resume"])
        if r.returncode != 0:
            raise SlurmHarnessError(f"resume {node} failed: {r.stderr.strip()}")
        self._wait_nodes_idle(timeout, self.hostnames(node))

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of every daemon log, for error messages."""
        files = sorted(self.log_dir.glob("*.log")) + sorted(self.log_dir.glob("*.err"))
        files.append(self.munge_dir / "munged.log")
        out = []
        for f in files:
            try:
                text = f.read_text(errors="replace")
            except OSError:
                continue
            out.append(f"==> {f} <==\n{_tail_text(text, lines)}")
        return "\n".join(out)


# ----------------------------------------------------------------- helpers
def _write(path: Path, text: str, mode: int) -> None:
    path.write_text(text)
    os.chmod(path, mode)


def _tail_text(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _parse_kv(line: str) -> dict[str, str]:
    """Parse ``Key=Value Key=Value`` (values without spaces, as in -o output)."""
    out = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out.setdefault(k, v)
    return out


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool:
    """True if pid exists and is not a zombie."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


#: The daemons a test cluster starts (what a killed run can leave listening on its ports)
OUR_DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "slurmrestd", "mariadbd", "mysqld", "munged")


def _stale_daemons(ports: list[int]) -> list[int]:
    """The pids of the test cluster daemons (OUR_DAEMONS) listening on `ports`: each port's listening socket in
    /proc/net/tcp(6), its owner found by the socket's inode among the processes' descriptors."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) in ports:  # 0A: LISTEN
                inodes.add(cols[9])
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            held = {os.readlink(f) for f in (d / "fd").iterdir()}
        except OSError:
            continue
        if any(f"socket:[{i}]" in held for i in inodes) and any(_is_program(int(d.name), n) for n in OUR_DAEMONS):
            pids.append(int(d.name))
    return pids


def _is_program(pid: int, name: str) -> bool:
    """Guard against pid reuse: the process must be the daemon we expect."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        comm = ""
    return exe.startswith(name) or comm.startswith(name[:15])
