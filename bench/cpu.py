"""All the CPU a command costs, detached work included: the command runs in a cgroup of its own.

A process's rusage counts only the children it waited for: a hook that starts something in the background (a
spool flush, a `nohup` helper, a daemonized child) would look cheaper than it is. A cgroup counts every process
that ever ran in it, whoever reaped it, so the meter puts the command into a fresh cgroup before it execs, waits
until the cgroup is empty (everything it started or left behind has ended), then reads the cgroup's CPU total.

Which cgroup, in order (`CpuMeter.method` says which one is used):
- ``cgroup2``: a directory created under the cgroup v2 hierarchy (the mount of type cgroup2, e.g. /sys/fs/cgroup
  or /sys/fs/cgroup/unified on a hybrid host), CPU from its ``cpu.stat`` (``usage_usec``: always kept, no
  controller needed);
- ``cgroup1``: a directory under the cgroup v1 ``cpuacct`` hierarchy, CPU from ``cpuacct.usage`` (ns);
- ``rusage``: neither is writable (not root, a container): wait4's rusage of the command and the children it
  waited for. Detached work is then not counted, and the report says so.

`systemd-run --scope` would give the same cgroup accounting, but needs a systemd manager on a bus; writing the
cgroup directly works wherever we are root, in containers too.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from pathlib import Path

_counter = itertools.count()


def _cgroup2_root() -> Path | None:
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            root = Path(parts[1])
            own = _own_cgroup2()
            return root / own.lstrip("/") if own else root
    return None


def _own_cgroup2() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


def _cgroup1_root() -> Path | None:
    for p in (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/cpu,cpuacct")):
        if (p / "cpuacct.usage").exists():
            return p
    return None


def _writable_dir(parent: Path | None) -> Path | None:
    if parent is None:
        return None
    probe = parent / f"attribution-bench-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return parent
    except OSError:
        return None


class CpuMeter:
    """Runs commands each in a fresh cgroup and reports (wall seconds, CPU seconds, exit status)."""

    def __init__(self) -> None:
        self.parent = _writable_dir(_cgroup2_root())
        self.method = "cgroup2" if self.parent else None
        if self.parent is None:
            self.parent = _writable_dir(_cgroup1_root())
            self.method = "cgroup1" if self.parent else "rusage"

    def describe(self) -> str:
        if self.method == "cgroup2":
            return f"a cgroup v2 of its own under {self.parent} (cpu.stat usage_usec, detached work included)"
        if self.method == "cgroup1":
            return f"a cgroup v1 of its own under {self.parent} (cpuacct.usage, detached work included)"
        return "wait4 rusage of the process and its waited-for children (no writable cgroup: detached work missed)"

    def _new_group(self) -> Path:
        g = self.parent / f"attribution-bench-{os.getpid()}-{next(_counter)}"
        g.mkdir()
        return g

    def _cpu(self, g: Path) -> float:
        if self.method == "cgroup2":
            for line in (g / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            raise RuntimeError(f"{g}/cpu.stat has no usage_usec")
        return int((g / "cpuacct.usage").read_text()) / 1e9

    @staticmethod
    def _empty(g: Path) -> bool:
        return not (g / "cgroup.procs").read_text().strip()

    def run(self, cmd: list[str], env: dict | None = None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            settle: float = 60.0) -> tuple[float, float, int]:
        """Run `cmd`; wait for it and for everything it left behind (at most `settle` s more, then kill)."""
        if self.method == "rusage":
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr)
            _, status, ru = os.wait4(p.pid, 0)
            return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status)
        g = self._new_group()
        procs = str(g / "cgroup.procs")

        def enter() -> None:  # in the child, before exec: everything it runs from now on is counted in g
            with open(procs, "w") as f:
                f.write("0")

        try:
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, preexec_fn=enter)
            _, status, _ = os.wait4(p.pid, 0)
            end = time.monotonic() + settle
            while not self._empty(g):
                if time.monotonic() > end:
                    for pid in (g / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), 9)
                        except OSError:
                            pass
                time.sleep(0.005)
            wall = time.perf_counter() - t0
            return wall, self._cpu(g), os.waitstatus_to_exitcode(status)
        finally:
            for _ in range(100):
                try:
                    g.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)

    def group(self):
        """A fresh cgroup for several processes started by hand (`enter_fn` for preexec_fn) or running already
        (`adopt`); `cpu()`, `pids()` and `empty()` read it, `close()` removes it. For the storm: 512 epilogs in
        one cgroup, the service's process tree in another."""
        return _Group(self)


class _Group:
    def __init__(self, meter: CpuMeter) -> None:
        self.meter = meter
        self.path = meter._new_group() if meter.method != "rusage" else None

    def enter_fn(self):
        if self.path is None:
            return None
        procs = str(self.path / "cgroup.procs")

        def enter() -> None:
            with open(procs, "w") as f:
                f.write("0")
        return enter

    def adopt(self, pids) -> None:
        """Move running processes (a server's tree) into this group: their CPU from now on is counted here, and
        so is that of every process they start later."""
        if self.path is None:
            return
        for pid in pids:
            try:
                with open(self.path / "cgroup.procs", "w") as f:
                    f.write(str(pid))
            except OSError:  # it ended meanwhile
                pass

    def pids(self) -> list[int]:
        return [] if self.path is None else [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def empty(self) -> bool:
        return self.path is None or CpuMeter._empty(self.path)

    def cpu(self) -> float | None:
        return None if self.path is None else self.meter._cpu(self.path)

    def close(self) -> None:
        """Remove the group; processes still in it (an adopted server) go back to the meter's parent group."""
        if self.path is None:
            return
        for pid in self.pids():
            try:
                with open(self.meter.parent / "cgroup.procs", "w") as f:
                    f.write(str(pid))
            except OSError:
                pass
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.01)


def tree_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of a long-lived server process and everything under it: its live descendants'
    own time, and the time of the children each of them reaped (a PostgreSQL postmaster reaps its backends, so
    those of closed connections count too). Read before and after a run for the server's share of it; 0 without
    the pid or /proc."""
    if pid is None:
        return 0.0
    try:
        tick = os.sysconf("SC_CLK_TCK")
        stats = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2:].split()  # after the command name, which may hold spaces
            stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))  # ppid; utime..cstime
    except OSError:
        return 0.0
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += stats[p][1]
            todo.extend(c for c, (ppid, _) in stats.items() if ppid == p)
    return total / tick
