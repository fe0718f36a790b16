"""`attribution serve`: the Attribution Service (REST API) on uvicorn."""

from __future__ import annotations

import contextlib
import os

import click

from attribution.cli import main, ruleset_of, settings_of


@main.command()
@click.option("--host", default=None, help="Address to listen on (default: service.listen, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port to listen on (default: service.listen, 8080).")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Worker processes (default: service.workers, 1).")
@click.option("--access-log/--no-access-log", default=True, show_default=True, help="Log every request.")
@click.option("--log-level", type=click.Choice(("debug", "info", "warning", "error")), default="info",
              show_default=True, help="The least severe log lines written.")
@click.option("--log-json", is_flag=True, help="Log one JSON object per line (time, host, level, logger, message).")
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None, workers: int | None, access_log: bool,
          log_level: str, log_json: bool) -> None:
    """Run the Attribution Service: hooks report observations to it, dashboards and scripts query it.

    Needs service.tokens_file (bearer tokens with scopes, readable by its owner only). Without a database url
    it starts the embedded database and serves from it. OpenAPI description: GET /openapi.json.
    """
    from attribution.api.auth import load_tokens
    from attribution.errors import ConfigError

    settings = settings_of(ctx)
    svc = settings.service
    if not svc.tokens_file:
        raise ConfigError("service.tokens_file is not set: the service never runs without tokens "
                          "(one 'scopes token [name]' per line, scopes report and/or read; chmod 600)")
    load_tokens(svc.tokens_file)  # refuse a bad or group-readable tokens file before listening
    ruleset_of(ctx)  # and a bad rule pack
    default_host, default_port = svc.host_port()
    host, port, workers = host or default_host, port or default_port, workers or svc.workers
    _check_listen(host, port)  # before the database starts: a port in use is one line and exit 2, at once
    obj = ctx.find_root().obj
    # Worker processes build their app from the environment (api.app.app_from_environment).
    if obj.get("config_path"):
        os.environ["ATTRIBUTION_CONFIG"] = str(os.path.abspath(obj["config_path"]))
    if obj.get("rules_dir"):
        os.environ["ATTRIBUTION_RULES"] = str(os.path.abspath(obj["rules_dir"]))
    # /metrics adds up every worker's counters from one directory (prometheus_client's multiprocess mode),
    # made new for each start so no earlier run's counts survive; removed when the service stops.
    import shutil
    import signal
    import tempfile

    metrics_dir = tempfile.mkdtemp(prefix="attribution-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    previous = signal.signal(signal.SIGTERM, _stopped)
    stopped_by = None
    try:
        _run(ctx, settings, host, port, workers, access_log, log_level, log_json)
    except _Stopped as exc:
        stopped_by = exc.signum
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    if stopped_by is not None:
        signal.raise_signal(stopped_by)  # the end uvicorn meant, once everything is cleaned up


class _Stopped(BaseException):  # not an Exception: no handler on the way may take it for an error
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stopped(signum: int, _frame) -> None:
    """SIGTERM (systemctl stop): uvicorn catches it, shuts down, and raises it again once done, so that the process
    ends by that signal; with the default action it would die there, before the cleanup of every block it is in
    (the metrics folder, the Kueue watcher, an embedded database). Raised as _Stopped, it unwinds them first."""
    raise _Stopped(signum)


def _run(ctx: click.Context, settings, host: str, port: int, workers: int, access_log: bool, log_level: str,
         log_json: bool) -> None:
    import uvicorn

    from attribution.api.logconfig import log_config
    from attribution.cli.db import open_store
    from attribution.store.db import describe

    with open_store(ctx, application_name="attribution-serve") as engine:
        if not settings.database.url:  # the embedded server this command started (it stays up while we serve)
            os.environ["ATTRIBUTION_DATABASE_URL"] = engine.url.render_as_string(hide_password=False)
        click.echo(f"attribution serve: http://{host}:{port} ({workers} worker(s)), database "
                   f"{describe(engine.url)}", err=True)
        _open_files_for(settings.service.max_connections)
        with _kueue_watcher(settings):
            uvicorn.run("attribution.api.app:app_from_environment", factory=True, host=host, port=port,
                        workers=workers, access_log=access_log, log_level=log_level,
                        log_config=log_config(log_level, log_json), timeout_graceful_shutdown=10,
                        timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
                        proxy_headers=False, server_header=False,
                        http="attribution.api.connections:BoundedH11Protocol")


def _check_listen(host: str, port: int) -> None:
    """Refuse, as a configuration error, an address this process cannot listen on (in use, not this machine's, a
    port below 1024 without the right), binding it the way uvicorn will (SO_REUSEADDR, IPv6 when the host has a
    colon) and letting it go at once."""
    import errno
    import socket

    from attribution.errors import ConfigError

    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    why = {errno.EADDRINUSE: "the address is in use (another attribution serve or another program listens there)",
           errno.EACCES: "permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE)",
           errno.EADDRNOTAVAIL: "no interface of this machine has that address"}
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {shown}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot listen on {shown}: {why.get(exc.errno, exc.strerror or str(exc))}") from None
    finally:
        sock.close()


#: How long uvicorn's supervisor waits for a worker to answer its ping before it kills the worker as hung and starts
#: another. uvicorn's default, 5 s, killed workers in the middle of storing a report when the host was busy (a
#: worker whose threads are parsing and attributing reports answers late on a loaded machine), and the client got
#: a closed connection instead of its verdict; a worker that is really hung is still replaced after a minute.
WORKER_HEALTHCHECK_SECONDS = 60

#: File descriptors a worker needs besides its client connections (database pool, logs, uploads, the rules).
SPARE_FILES = 128


def _open_files_for(max_connections: int) -> None:
    """Raise the soft open-files limit to the hard one; refuse a connection limit the process could not hold."""
    import resource

    from attribution.errors import ConfigError

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and max_connections + SPARE_FILES > soft:
        raise ConfigError(f"service.max_connections is {max_connections} but this process may open only {soft} "
                          f"files ({SPARE_FILES} are kept for the database and logs): lower max_connections or "
                          f"raise LimitNOFILE")


@contextlib.contextmanager
def _kueue_watcher(settings):
    """With `watch.kueue.serve`, `attribution watch kueue` runs beside the service for as long as it serves: one
    process (not one per worker), with the service's configuration, rules and database; stopped with SIGTERM."""
    if not settings.watch.kueue.serve:
        yield None
        return
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "attribution.cli", "watch", "kueue"], env=os.environ.copy())
    click.echo(f"attribution serve: watching Kueue workloads (process {proc.pid})", err=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
