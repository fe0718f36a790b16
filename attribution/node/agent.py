"""The node agent: what the Slurm hooks run (`attribution epilog ...`, or `attribution-node epilog ...`).

It imports only what a hook run needs: the collectors, the extraction engine and the spool, with the rule pack
and the settings from the node's cache (rulepack/cache.py, node/settings.py). No click, YAML, JSON Schema,
pydantic, ORM, Alembic or web framework is loaded on the way; reporting to PostgreSQL directly loads the store
(SQLAlchemy Core and psycopg, the `attribution[db]` extra) only when the database is the target. It runs on
Python 3.9 and later (compat.py), where the central side needs 3.11.

    attribution-node [--config FILE] [--rules DIR] epilog [--budget S] [--kernel-source auto|journald|dmesg|file]
                     [--kernel-file F] [--fabricmanager-log F] [--scontrol-output F] [--started EPOCH]
                     [--telemetry DIR] [--state-dir DIR]
    attribution-node nvml-snapshot FILE
    attribution-node [--config FILE] [--rules DIR] spool flush [--no-wait] [--timeout S]
    attribution-node [--config FILE] spool status
    attribution-node --version

`epilog` never fails: it prints one line saying what it did and exits 0, so that a Slurm epilog calling it can
never drain a node because of us. `spool flush` exits 3 when files are left, 2 on bad configuration.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

__all__ = ["main", "run_epilog"]

KERNEL_SOURCES = ("auto", "journald", "dmesg", "file")


def _parser():
    import argparse

    p = argparse.ArgumentParser(prog="attribution-node", description="The attribution node agent (Slurm hooks).")
    p.add_argument("--config", default=None, help="Configuration file (default: as `attribution`).")
    p.add_argument("--rules", default=os.environ.get("ATTRIBUTION_RULES") or None, help="Rule pack directory.")
    p.add_argument("--version", action="store_true", help="Print the version and exit.")
    sub = p.add_subparsers(dest="command")
    e = sub.add_parser("epilog", help="What hooks/epilog and hooks/epilog-slurmctld run. Always exits 0.")
    e.add_argument("--budget", type=float, default=None)
    e.add_argument("--kernel-source", choices=KERNEL_SOURCES, default=None)
    e.add_argument("--kernel-file", default=None)
    e.add_argument("--fabricmanager-log", default=None)
    e.add_argument("--scontrol-output", default=None)
    e.add_argument("--started", type=float, default=None)
    e.add_argument("--telemetry", dest="telemetry_dir", default=None)
    e.add_argument("--state-dir", dest="state_dir", default=None)
    n = sub.add_parser("nvml-snapshot", help="What hooks/lib.sh runs with ATTRIBUTION_GPU_TOOL=nvml: the GPU "
                       "counters through NVML (nvidia-ml-py) into FILE. Always exits 0.")
    n.add_argument("file")
    s = sub.add_parser("spool", help="The local spool of reports waiting for the database or the service.")
    ss = s.add_subparsers(dest="spool_command")
    f = ss.add_parser("flush")
    f.add_argument("--no-wait", dest="wait", action="store_false", default=True)
    f.add_argument("--timeout", type=float, default=None)
    ss.add_parser("status")
    return p


#: `epilog`'s options that take a value, by flag: what hooks/lib.sh passes on every failed job
_EPILOG_VALUES = {"--budget": "budget", "--kernel-source": "kernel_source", "--kernel-file": "kernel_file",
                  "--fabricmanager-log": "fabricmanager_log", "--scontrol-output": "scontrol_output",
                  "--started": "started", "--telemetry": "telemetry_dir", "--state-dir": "state_dir"}
_GLOBAL_VALUES = {"--config": "config", "--rules": "rules"}


def _epilog_args(argv: list[str]):
    """The arguments of `[--config F] [--rules D] epilog --flag value ...` with every flag spelled out, as the hooks
    run it, without building the argparse parser (its help strings go through gettext, which looks for message
    catalogs on disk: ~5 ms of every hook's CPU). None for anything else (an abbreviation, `--flag=value`, --help,
    a bad value): argparse then parses it, with its messages."""
    from types import SimpleNamespace

    ns = SimpleNamespace(config=None, rules=os.environ.get("ATTRIBUTION_RULES") or None, version=False,
                            command=None, **{k: None for k in _EPILOG_VALUES.values()})
    i = 0
    while i + 1 < len(argv) and argv[i] in _GLOBAL_VALUES:
        setattr(ns, _GLOBAL_VALUES[argv[i]], argv[i + 1])
        i += 2
    if i >= len(argv) or argv[i] != "epilog":
        return None
    ns.command = "epilog"
    rest = argv[i + 1:]
    if len(rest) % 2:
        return None
    for flag, value in zip(rest[::2], rest[1::2]):
        if flag not in _EPILOG_VALUES or value.startswith("-") and flag not in ("--started", "--budget"):
            return None
        setattr(ns, _EPILOG_VALUES[flag], value)
    try:
        ns.budget = None if ns.budget is None else float(ns.budget)
        ns.started = None if ns.started is None else float(ns.started)
    except ValueError:
        return None
    if ns.kernel_source is not None and ns.kernel_source not in KERNEL_SOURCES:
        return None
    return ns


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _epilog_args(argv) or _parser().parse_args(argv)
    if args.version:
        from attribution.resources import version

        print(f"attribution-node {version()}")
        return 0
    if args.command == "epilog":
        run_epilog(args.config, args.rules, budget=args.budget, kernel_source=args.kernel_source,
                   kernel_file=args.kernel_file, fabricmanager_log=args.fabricmanager_log,
                   scontrol_output=args.scontrol_output, started=args.started, telemetry_dir=args.telemetry_dir,
                   state_dir=args.state_dir)
        return 0
    if args.command == "nvml-snapshot":
        nvml_snapshot(args.file)
        return 0
    if args.command == "spool" and args.spool_command in ("flush", "status"):
        from attribution.errors import AttributionError, ConfigError

        try:
            if args.spool_command == "status":
                return spool_status(args.config)
            return spool_flush(args.config, args.rules, wait=args.wait, timeout=args.timeout)
        except ConfigError as exc:
            print(f"attribution-node: {exc}", file=sys.stderr)
            return 2
        except AttributionError as exc:
            print(f"attribution-node: {exc}", file=sys.stderr)
            return 3
    _parser().print_usage(sys.stderr)
    return 2


def _rules(rules_dir, settings):
    """(the rule pack, a function caching it when it was not cached yet: call it when the report is out)."""
    from attribution.node.settings import cache_dir
    from attribution.rulepack.cache import rules_and_saver

    return rules_and_saver(rules_dir or settings.rules_dir, cache_dir())


def _engine_factory(settings, config_path, deadline: float):
    """A context manager giving an engine whose connect and statement timeouts fit the hook's remaining budget.
    Loads the store (the [db] extra) only when called: the database is the target."""
    def make():
        import importlib.util

        missing = [m for m in ("sqlalchemy", "psycopg") if importlib.util.find_spec(m) is None]
        if missing:
            from attribution.errors import ConfigError

            raise ConfigError(f"reporting to the database needs attribution[db] (no {', '.join(missing)} here): "
                              f"pip install 'attribution[db]', or report to the service (service_url)")
        remaining = max(1.0, deadline - time.monotonic())
        db = settings.database
        s = settings
        if not db.url:  # the embedded database: the full settings, as the command line has them
            from attribution.config import load_settings

            s = load_settings(config_path)
        from dataclasses import replace

        from attribution.node.settings import NodeSettings

        changes = {"connect_timeout": min(db.connect_timeout, remaining / 2),
                   "statement_timeout_ms": int(min(db.statement_timeout_ms, remaining * 1000))}
        s = replace(s, database=replace(s.database, **changes)) if not isinstance(s, NodeSettings) \
            else s.with_database(**changes)
        return open_store(s, pool_size=1, application_name="attribution-epilog", deadline=deadline)
    return make


@contextlib.contextmanager
def open_store(settings, pool_size: int | None = None, application_name: str = "attribution-node",
               deadline: float | None = None):
    """An engine on the configured database. Without database.url it is the embedded one, as for the command
    line (a laptop trying the tool: the full CLI's lease starts and stops it)."""
    if not settings.database.url:
        from attribution.cli.db import open_store as cli_open_store

        with cli_open_store(None, settings=settings, pool_size=pool_size, application_name=application_name,
                            deadline=deadline) as engine:
            yield engine
        return
    from attribution.store import db as storedb

    engine = storedb.make_engine(storedb.resolve_target(settings), settings, pool_size=pool_size,
                                 application_name=application_name, deadline=deadline)
    try:
        yield engine
    finally:
        engine.dispose()


def run_epilog(config_path=None, rules_dir=None, *, budget: float | None = None, kernel_source: str | None = None,
               kernel_file: str | None = None, fabricmanager_log: str | None = None,
               scontrol_output: str | None = None, started: float | None = None, telemetry_dir: str | None = None,
               state_dir: str | None = None, out=None, err=None) -> None:
    """One hook run: reads the Slurm environment, prints its line. Never raises."""
    out = out or sys.stdout
    err = err or sys.stderr
    t0 = time.monotonic()
    if started is not None:  # the time Python took to start counts against the budget
        t0 -= max(0.0, min(time.time() - started, 60.0))
    try:
        from attribution import compat

        compat.enable()
        from attribution.node import epilog as hook
        from attribution.node.settings import node_settings
        from attribution.scope.slurm import parse_env

        settings = node_settings(config_path)
        ep = settings.epilog
        settings = settings.with_epilog(
            budget_seconds=budget or ep.budget_seconds,
            kernel_source=kernel_source or ("file" if kernel_file else ep.kernel_source),
            kernel_file=str(kernel_file) if kernel_file else ep.kernel_file,
            fabricmanager_log=str(fabricmanager_log) if fabricmanager_log else ep.fabricmanager_log,
            # the hooks' own state folder (the prolog's stamp: the job's start and log offsets where Slurm's
            # environment has no start time, as on 22.05): the hook says where it is, the configuration may not
            state_dir=str(state_dir) if state_dir else ep.state_dir)
        ep = settings.epilog
        # stop storing with a margin (a last connect attempt may take 2 s) for writing the spool before the
        # hook's `timeout` kills this process
        deadline = t0 + max(1.0, ep.budget_seconds - max(2.5, 0.15 * ep.budget_seconds))
        env = parse_env(os.environ)
        rs, save_rules = _rules(rules_dir, settings)
        factory = _engine_factory(settings, config_path, deadline)
        if env.is_controller:
            from attribution.scope.scontrol import read_show_job

            # scontrol prints what users named things (job names, comments): any bytes (issue 18, L4)
            info = read_show_job(scontrol_output) if scontrol_output else None
            report = hook.run_controller(rs, settings, env, factory, deadline, info=info)
        else:
            from pathlib import Path

            report = hook.run_node(rs, settings, env, factory, deadline,
                                   telemetry_dir=Path(telemetry_dir) if telemetry_dir else None)
        print(f"attribution epilog: {report.line()}", file=out)
        save_rules()  # a first run on this pack: the next runs read it compiled
        from attribution.node import textfile

        textfile.write_spool(settings.spool)
    except Exception as exc:  # never let the hook fail
        print(f"attribution epilog: error: {type(exc).__name__}: {exc} ({time.monotonic() - t0:.3f}s)", file=err)


def nvml_snapshot(path: str, err=None) -> None:
    """The GPU part of a counter snapshot through NVML, into `path` (collect/nvml.py). Never raises: without
    nvidia-ml-py or the driver the file holds one note (a coverage gap)."""
    try:
        from attribution import compat

        compat.enable()
        from attribution.collect.nvml import nvml_listing, write_listing

        write_listing(path, nvml_listing())
    except Exception as exc:  # never let the hook fail: no listing is a coverage gap
        print(f"attribution nvml-snapshot: {type(exc).__name__}: {exc}", file=err or sys.stderr)


def spool_status(config_path=None) -> int:
    from attribution.node import spool
    from attribution.node.settings import node_settings

    settings = node_settings(config_path)
    files = spool.pending(settings.spool)
    bad_dir = settings.spool / "bad"
    bad = list(bad_dir.glob("*.spool")) if bad_dir.is_dir() else []
    print(f"{settings.spool}: {len(files)} pending, {len(bad)} bad")
    return 0


def spool_flush(config_path=None, rules_dir=None, wait: bool = True, timeout: float | None = None) -> int:
    """Store every spooled payload once (safe to run any number of times, e.g. from a systemd timer): through
    the service when service_url is set, else in the
    database (loads the store)."""
    from attribution import compat

    compat.enable()
    from attribution.node import spool
    from attribution.node.epilog import replay, replay_to_service
    from attribution.node.settings import node_settings

    settings = node_settings(config_path)
    deadline = time.monotonic() + timeout if timeout else None
    if not spool.pending(settings.spool):
        from attribution.node import textfile

        textfile.write_spool(settings.spool)  # kept fresh by the flush timer: a stale file means no timer
        print(f"{settings.spool}: nothing to replay")
        return 0
    if settings.service_url:
        from attribution.node.service_client import client_from_settings

        with client_from_settings(settings) as client:
            res = spool.flush(settings.spool, lambda d: replay_to_service(client, d, deadline),
                              deadline=deadline, wait_for_lock=wait)
    else:
        rs, save_rules = _rules(rules_dir, settings)
        save_rules()
        if not settings.database.url:
            from attribution.config import load_settings

            settings = load_settings(config_path)
        with open_store(settings) as engine:
            res = spool.flush(settings.spool, lambda d: replay(rs, engine, d, deadline), deadline=deadline,
                              wait_for_lock=wait)
    from attribution.node import textfile

    textfile.write_spool(settings.spool)
    print(f"{settings.spool}: replayed {res.replayed}, left {res.left}, bad {len(res.bad)}"
          + (f"; stopped: {res.error}" if res.error else "")
          + ("; another flush holds the lock" if res.locked_out else ""))
    for b in res.bad:
        print(f"  bad: {b}", file=sys.stderr)
    return 3 if res.error or res.left else 0


def script() -> None:
    """The `attribution-node` console script: main(), then an exit without the interpreter's teardown."""
    fast_exit(main())


def fast_exit(code: int) -> None:
    """Exit once stdout and stderr are flushed, without the interpreter's teardown (freeing every object of the
    rule pack one by one costs a hook ~10 ms of CPU). Every file the agent writes is closed by then."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if isinstance(code, int) else 1)


if __name__ == "__main__":
    script()
