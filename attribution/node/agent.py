"""The node collector: what a compute node's Slurm epilog runs (`attribution-node epilog ...`).

It reads this node's part of the job's evidence (the kernel log or journal and the Fabric Manager log for the
job's window, bounded), keeps the lines holding one of the filter's fixed strings, takes the counter snapshots as
the tools wrote them, and sends one observation document (node/document.py) to `attribution serve`. The document
is written to the spool first and sent from there, so nothing is lost when the service is away or the hook is
killed. What the lines mean is decided at the centre: no rule pack, no database, no third-party module here, only
the standard library, on Python 3.9 and later.

    attribution-node epilog [--budget S] [--started EPOCH] [--kernel-source auto|journald|dmesg|file]
                            [--kernel-file F] [--fabricmanager-log F] [--telemetry DIR] [--state-dir DIR]
                            [--filter FILE]
    attribution-node spool flush [--no-wait] [--timeout S]
    attribution-node spool status
    attribution-node --version

Settings: hook.env and the environment (node/hookenv.py). `epilog` never fails: it prints one line saying what it
did and exits 0, so that a Slurm epilog calling it can never drain a node because of us. `spool flush` exits 3
when files are left, 2 on bad settings.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["main", "run_epilog", "script"]

KERNEL_SOURCES = ("auto", "journald", "dmesg", "file")
#: seconds the kernel's journal is read before the job's start and after its end (the causal graph's margins,
#: rules/causal-graph.yaml before_start_seconds and after_end_seconds; hooks/lib.sh reads the same)
MARGIN_SECONDS = 300


def version() -> str:
    from attribution import __version__

    return __version__


def _parser():
    import argparse

    p = argparse.ArgumentParser(prog="attribution-node", description="The attribution node collector: what the "
                                "Slurm hooks of a compute node run (standard library only).")
    p.add_argument("--version", action="store_true", help="Print the version and exit.")
    sub = p.add_subparsers(dest="command")
    e = sub.add_parser("epilog", help="Collect this node's evidence of the job and report it. Always exits 0.",
                       description="Collect this node's evidence of the job that just ended (its kernel and "
                                   "Fabric Manager logs for the job's window, the counter snapshots) and report "
                                   "it to the service, through the spool. Always exits 0.")
    e.add_argument("--budget", type=float, default=None, help="Seconds this run may take (ATTRIBUTION_BUDGET).")
    e.add_argument("--started", type=float, default=None,
                   help="Epoch seconds when the hook started this run: the budget counts from then.")
    e.add_argument("--kernel-source", choices=KERNEL_SOURCES, default=None,
                   help="Where the kernel log is read (ATTRIBUTION_KERNEL_SOURCE).")
    e.add_argument("--kernel-file", default=None, help="The kernel log file for kernel source 'file'.")
    e.add_argument("--fabricmanager-log", default=None, help="The Fabric Manager log (ATTRIBUTION_FM_LOG).")
    e.add_argument("--telemetry", dest="telemetry_dir", default=None,
                   help="The folder holding the hooks' counter snapshots (prolog/ and epilog/).")
    e.add_argument("--state-dir", dest="state_dir", default=None,
                   help="The hooks' state folder holding the prolog's start stamp (ATTRIBUTION_STATE_DIR).")
    e.add_argument("--filter", dest="filter_file", default=None,
                   help="The generated fixed-string filter (ATTRIBUTION_FILTER; suspicious.patterns).")
    s = sub.add_parser("spool", help="The reports waiting on this node for the service.",
                       description="The reports waiting on this node for the service.")
    ss = s.add_subparsers(dest="spool_command")
    f = ss.add_parser("flush", help="Send every waiting report once (for a timer); exits 3 when some are left.")
    f.add_argument("--no-wait", dest="wait", action="store_false", default=True,
                   help="Give up at once when another flush holds the spool.")
    f.add_argument("--timeout", type=float, default=None, help="Stop after this many seconds.")
    ss.add_parser("status", help="How many reports wait, and how many were set aside.")
    return p


#: `epilog`'s options that take a value, by flag: what hooks/lib.sh passes on every failed job
_EPILOG_VALUES = {"--budget": "budget", "--started": "started", "--kernel-source": "kernel_source",
                  "--kernel-file": "kernel_file", "--fabricmanager-log": "fabricmanager_log",
                  "--telemetry": "telemetry_dir", "--state-dir": "state_dir", "--filter": "filter_file"}


def _epilog_args(argv: list[str]):
    """The arguments of `epilog --flag value ...` with every flag spelled out, as the hooks run it, without
    building the argparse parser (its help strings go through gettext, which looks for message catalogs on disk:
    ~5 ms of every hook's CPU). None for anything else (an abbreviation, `--flag=value`, --help, a bad value):
    argparse then parses it, with its messages."""
    if not argv or argv[0] != "epilog" or len(argv) % 2 == 0:
        return None
    ns = {k: None for k in _EPILOG_VALUES.values()}
    for flag, value in zip(argv[1::2], argv[2::2]):
        if flag not in _EPILOG_VALUES or value.startswith("-") and flag not in ("--started", "--budget"):
            return None
        ns[_EPILOG_VALUES[flag]] = value
    try:
        for k in ("budget", "started"):
            ns[k] = None if ns[k] is None else float(ns[k])
    except ValueError:
        return None
    if ns["kernel_source"] is not None and ns["kernel_source"] not in KERNEL_SOURCES:
        return None
    return ns


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fast = _epilog_args(argv)
    if fast is not None:
        run_epilog(**fast)
        return 0
    args = _parser().parse_args(argv)
    if args.version:
        print(f"attribution-node {version()}")
        return 0
    if args.command == "epilog":
        run_epilog(budget=args.budget, started=args.started, kernel_source=args.kernel_source,
                   kernel_file=args.kernel_file, fabricmanager_log=args.fabricmanager_log,
                   telemetry_dir=args.telemetry_dir, state_dir=args.state_dir, filter_file=args.filter_file)
        return 0
    if args.command == "spool" and args.spool_command == "status":
        return spool_status()
    if args.command == "spool" and args.spool_command == "flush":
        return spool_flush(wait=args.wait, timeout=args.timeout)
    _parser().print_usage(sys.stderr)
    return 2


class Outcome:
    """What one epilog run did, for its log line."""

    __slots__ = ("job_id", "logs", "kept", "stored", "spooled", "replayed", "skipped", "error", "answer",
                 "seconds", "notes")

    def __init__(self, job_id: str) -> None:
        self.job_id, self.logs, self.kept = job_id, 0, 0
        self.stored, self.spooled, self.replayed = False, None, 0
        self.skipped = self.error = self.answer = None
        self.seconds = 0.0
        self.notes: list[str] = []

    def line(self) -> str:
        parts = [f"node job {self.job_id}", f"{self.kept} line(s) of {self.logs} log(s) kept"]
        parts += self.notes
        if self.skipped:
            parts.append(f"skipped: {self.skipped}")
        if self.stored:
            parts.append("stored" + (f" ({self.answer})" if self.answer else ""))
        if self.replayed:
            parts.append(f"replayed {self.replayed} spooled")
        if self.spooled:
            parts.append(f"spooled to {self.spooled}")
        if self.error:
            parts.append(f"error: {self.error}")
        parts.append(f"{self.seconds:.3f}s")
        return "; ".join(parts)


def _int(v, default: int) -> int:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return default


def read_prolog_stamp(state_dir: str, job_id: str) -> tuple[float | None, dict]:
    """The start time and log offsets `hooks/prolog` wrote when the job started on this node."""
    try:
        with open(os.path.join(state_dir, f"job-{job_id}.start"), "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None, {}
    start, offsets = None, {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if not value.strip().isdigit() or len(value.strip()) > 18:
            continue
        if key == "start":
            start = float(value)
        elif key.endswith("_offset"):
            offsets[key[: -len("_offset")]] = int(value)
    return start, offsets


def boot_time() -> float | None:
    """When this node booted (btime in /proc/stat): the centre places /dev/kmsg's stamps with it."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f.read(1 << 16).splitlines():
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def local_zone() -> str:
    """This node's time zone, for log stamps that carry none (syslog's, dmesg -T's): the IANA name /etc/localtime
    links to, else the offset in force now (+09:00)."""
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        name = target.split("zoneinfo/", 1)[1]
        if name and all(part and part[0].isalpha() for part in name.split("/")):
            return name
    off = time.localtime().tm_gmtoff
    sign = "-" if off < 0 else "+"
    return f"{sign}{abs(off) // 3600:02d}:{abs(off) % 3600 // 60:02d}"


def default_filter() -> str | None:
    """The filter shipped with the hooks, beside this package (an installed wheel's attribution/_data/hooks/, a
    checkout's hooks/): what a run outside the hooks uses (the hooks name theirs, the one beside them)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for hooks in (os.path.join(here, "_data", "hooks"), os.path.join(os.path.dirname(here), "hooks")):
        path = os.path.join(hooks, "suspicious.patterns")
        if os.path.isfile(path):
            return path
    return None


def _filter(path: str | None) -> tuple[list[bytes] | None, object, str | None, str | None]:
    """(the filter's strings, the error-looking lines' patterns, the filter's digest, a problem) of the filter
    file (the shipped one when none is named) and of error-lines.patterns beside it (logs.read_error_lines)."""
    import hashlib

    from attribution.node.logs import read_error_lines, read_filter

    path = path or default_filter()
    if not path:
        return None, None, None, "no filter file found (ATTRIBUTION_FILTER)"
    errorlike = read_error_lines(os.path.join(os.path.dirname(path), "error-lines.patterns"))
    try:
        strings = read_filter(path)
    except OSError as exc:
        return None, errorlike, None, f"filter {path}: {exc.strerror or exc}"
    return strings, errorlike, hashlib.sha256(b"\n".join(strings)).hexdigest(), None


def collect(settings, environ, t0: float, deadline: float, *, kernel_source=None, kernel_file=None,
            fabricmanager_log=None, telemetry_dir=None, state_dir=None, filter_file=None) -> tuple[dict, Outcome]:
    """This node's observation document of the job in `environ`, and the run's outcome so far."""
    from attribution.node import logs as nodelogs
    from attribution.node.document import node_document, slurm_values
    from attribution.node.snapshots import read_snapshots

    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
    out = Outcome(job_id)
    node = environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    state_dir = state_dir or settings.get("ATTRIBUTION_STATE_DIR")
    prolog_start, offsets = read_prolog_stamp(state_dir, job_id)
    now = time.time()
    lookback = _int(settings.get("ATTRIBUTION_LOOKBACK_SECONDS"), 86400)
    start = _int(environ.get("SLURM_JOB_START_TIME"), 0) or prolog_start or now - lookback
    end = _int(environ.get("SLURM_JOB_END_TIME"), 0) or now
    max_read = _int(settings.get("ATTRIBUTION_NODE_LOG_BYTES"), 64 << 20)
    max_kept = _int(settings.get("ATTRIBUTION_KEPT_BYTES"), 8 << 20)
    strings, errorlike, digest, problem = _filter(filter_file or settings.get("ATTRIBUTION_FILTER"))
    if problem:
        out.notes.append(problem + ": every line kept")
    kind = kernel_source or settings.get("ATTRIBUTION_KERNEL_SOURCE") or "auto"
    kfile = kernel_file or settings.get("ATTRIBUTION_KERNEL_FILE")
    timeout = max(1.0, (deadline - time.monotonic()) / 3)
    # the error-looking lines are the first thing left out when time runs short: the report must reach the spool
    select_by = t0 + max(0.5, (deadline - t0) * 0.6)
    fm = fabricmanager_log if fabricmanager_log is not None else settings.get("ATTRIBUTION_FM_LOG")
    readers = [("kernel", kfile if kind in ("file", "auto") and kfile else kind,
                lambda: nodelogs.read_kernel(kind, kfile, offsets.get("kernel", 0), start - MARGIN_SECONDS,
                                             end + MARGIN_SECONDS, timeout, max_read))]
    if fm:
        readers.append(("fabricmanager", fm, lambda: (fm, *nodelogs.read_file(fm, offsets.get("fabricmanager", 0),
                                                                             max_read))))
    logs = []
    for source, origin, read in readers:
        try:
            origin, data, how = read()
            log = {"source": source, "origin": origin, **how, "lines": 0, "bytes": 0, "blocks": [], "cut": False}
            if data:
                keep = strings if strings is not None else [b""]
                log["blocks"], log["lines"], log["cut"] = nodelogs.select_lines(data, keep, max_bytes=max_kept,
                                                                                errorlike=errorlike,
                                                                                deadline=select_by)
                log["bytes"] = len(data)
        except Exception as exc:  # a fault of ours on this log: the report still goes out, saying what was lost
            log = {"source": source, "origin": origin, "status": "error", "lines": 0, "bytes": 0, "blocks": [],
                   "reason": f"collection failed: {type(exc).__name__}: {exc}"[:500], "cut": False}
        out.kept += sum(len(b[1]) for b in log["blocks"])
        logs.append(log)
    out.logs = len(logs)
    try:
        sysfs_root = settings.get("ATTRIBUTION_SYSFS_ROOT") or ""  # where the collector reads the PCI topology
        counters = read_snapshots(telemetry_dir, sysfs_root) if telemetry_dir else {}
    except Exception as exc:  # the same for the snapshots: the logs still go out
        counters = {}
        out.notes.append(f"counter snapshots not read: {type(exc).__name__}: {exc}"[:300])
    doc = node_document(node, environ.get("SLURM_CLUSTER_NAME") or settings.get("ATTRIBUTION_CLUSTER"),
                        slurm_values(environ), now, prolog_start, boot_time(), lookback, local_zone(), logs, counters,
                        f"attribution-node {version()}", digest)
    return doc, out


def client(settings):
    """The service's client from the settings (post.Unreachable when they say no service, or no token)."""
    from attribution.node.post import Client, Unreachable, read_token

    url = settings.get("ATTRIBUTION_SERVICE_URL")
    if not url:
        raise Unreachable("no service named (ATTRIBUTION_SERVICE_URL)")
    token_file = settings.get("ATTRIBUTION_SERVICE_TOKEN_FILE")
    if not token_file:
        raise Unreachable("ATTRIBUTION_SERVICE_URL is set but ATTRIBUTION_SERVICE_TOKEN_FILE is not")
    timeout = float(_int(settings.get("ATTRIBUTION_SERVICE_TIMEOUT"), 10))
    return Client(url, read_token(token_file), settings.get("ATTRIBUTION_SERVICE_CA_FILE"), timeout)


def send(spool_dir: str, settings, deadline: float | None, wait: bool = False):
    """Every waiting report (oldest first) to the service: spool.flush with the client's post. A report the
    service refuses for good goes to bad/ with the reason."""
    from pathlib import Path

    from attribution.node import spool
    from attribution.node.post import Refused

    c = client(settings)

    def post(doc: dict):
        try:
            return c.post(doc, deadline if deadline is not None else time.monotonic() + c.timeout * c.attempts)
        except Refused as exc:
            raise spool.Refused(f"refused by the service: {exc}") from exc

    return spool.flush(Path(spool_dir), post, deadline=deadline, wait_for_lock=wait)


def run_epilog(budget: float | None = None, started: float | None = None, out=None, err=None,
               environ=None, **where) -> None:
    """One hook run: collect, spool, send; prints its line. Never raises."""
    out = out or sys.stdout
    t0 = time.monotonic()
    if started is not None:  # the time Python took to start counts against the budget
        t0 -= max(0.0, min(time.time() - started, 60.0))
    environ = os.environ if environ is None else environ
    try:
        from attribution.node import hookenv, spool, textfile

        settings = hookenv.settings(environ)
        if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
            print("attribution epilog: not running under Slurm (no SLURM_JOB_ID): nothing to do", file=out)
            return
        if environ.get("SLURM_SCRIPT_CONTEXT") == "epilog_slurmctld" or not environ.get("SLURMD_NODENAME"):
            print("attribution epilog: this is the controller's epilog: it runs `attribution epilog` (the full "
                  "install), not the node collector", file=out)
            return
        budget = budget or float(_int(settings.get("ATTRIBUTION_BUDGET"), 20))
        # stop sending with a margin for the last attempt, before the hook's `timeout` kills this process
        deadline = t0 + max(1.0, budget - max(2.5, 0.15 * budget))
        doc, outcome = collect(settings, environ, t0, deadline, **where)
        if settings.problem:
            outcome.notes.append(f"hook.env ignored: {settings.problem}")
        failed = environ.get("SLURM_JOB_EXIT_CODE", "0") not in ("", "0") or \
            environ.get("SLURM_JOB_EXIT_CODE2", "0:0") not in ("", "0:0")
        spool_dir = settings.get("ATTRIBUTION_SPOOL_DIR")
        if not failed and not outcome.kept and not doc.get("counters"):
            outcome.skipped = "clean job, nothing to report"
        else:
            path = spool.write(__import__("pathlib").Path(spool_dir), doc)
            try:
                res = send(spool_dir, settings, deadline)
            except Exception as exc:  # no service named, no token: kept for a later flush
                outcome.spooled, outcome.error = path, _first(exc)
            else:
                set_aside = any(b.startswith(path.name + ":") for b in res.bad)
                if path.exists():
                    outcome.spooled = path
                    outcome.error = res.error or ("another flush holds the spool" if res.locked_out else None)
                    outcome.replayed = res.replayed
                elif not set_aside:
                    outcome.stored = True
                    outcome.replayed = max(0, res.replayed - 1)
                else:
                    outcome.replayed = res.replayed
                for b in res.bad:
                    outcome.notes.append(f"set aside: {b}")
        _forget_stamp(where.get("state_dir") or settings.get("ATTRIBUTION_STATE_DIR"), outcome.job_id)
        outcome.seconds = time.monotonic() - t0
        print(f"attribution epilog: {outcome.line()}", file=out)
        textfile.write_spool(__import__("pathlib").Path(spool_dir), settings.values)
    except Exception as exc:  # never let the hook fail
        print(f"attribution epilog: error: {type(exc).__name__}: {exc} ({time.monotonic() - t0:.3f}s)",
              file=err or sys.stderr)


def _first(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _forget_stamp(state_dir: str | None, job_id: str) -> None:
    if state_dir and job_id:
        try:
            os.unlink(os.path.join(state_dir, f"job-{job_id}.start"))
        except OSError:
            pass


def spool_status() -> int:
    from pathlib import Path

    from attribution.node import hookenv, spool

    settings = hookenv.settings()
    folder = Path(settings.get("ATTRIBUTION_SPOOL_DIR"))
    bad = list((folder / "bad").glob("*.spool")) if (folder / "bad").is_dir() else []
    print(f"{folder}: {len(spool.pending(folder))} pending, {len(bad)} bad")
    return 0


def spool_flush(wait: bool = True, timeout: float | None = None) -> int:
    """Send every spooled report once (safe to run any number of times, e.g. from a systemd timer)."""
    from pathlib import Path

    from attribution.node import hookenv, spool, textfile
    from attribution.node.post import Unreachable

    settings = hookenv.settings()
    if settings.problem:
        print(f"attribution-node: hook.env ignored: {settings.problem}", file=sys.stderr)
    folder = Path(settings.get("ATTRIBUTION_SPOOL_DIR"))
    if not spool.pending(folder):
        textfile.write_spool(folder, settings.values)  # kept fresh by the flush timer: a stale file means no timer
        print(f"{folder}: nothing to send")
        return 0
    try:
        res = send(str(folder), settings, time.monotonic() + timeout if timeout else None, wait=wait)
    except Unreachable as exc:
        print(f"attribution-node: {exc}", file=sys.stderr)
        return 2
    textfile.write_spool(folder, settings.values)
    print(f"{folder}: sent {res.replayed}, left {res.left}, bad {len(res.bad)}"
          + (f"; stopped: {res.error}" if res.error else "")
          + ("; another flush holds the lock" if res.locked_out else ""))
    for b in res.bad:
        print(f"  bad: {b}", file=sys.stderr)
    return 3 if res.error or res.left else 0


def script() -> None:
    """The `attribution-node` console script: main(), then an exit without the interpreter's teardown."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if isinstance(code, int) else 1)


if __name__ == "__main__":
    script()
