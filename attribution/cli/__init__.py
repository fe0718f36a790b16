"""The command line. The only place (with the hooks and the API) where errors become exit codes.

Exit codes: 0 done (whatever the verdict; also when the reader of the output went away, as `attribution jobs | head -1`
does), 1 a check found problems, 2 bad input or configuration, 3 the database could not be reached or refused the
work.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from attribution.errors import AttributionError, ConfigError, InputError, RulePackError, StoreError

EXIT_PROBLEMS = 1
EXIT_BAD_INPUT = 2
EXIT_STORE = 3
#: The extra that brings each third-party module a command may import when it runs (pyproject.toml; checked by
#: tests/test_packaging.py): a command whose module is missing says which extra to install.
EXTRA_OF = {"click": "engine", "yaml": "engine", "jsonschema": "engine", "referencing": "engine",
            "pydantic": "engine", "re2": "engine", "hostlist": "engine",
            "sqlalchemy": "db", "psycopg": "db", "alembic": "db", "altair": "reports", "vl_convert": "reports",
            "fastapi": "server", "starlette": "server", "anyio": "server", "uvicorn": "server", "jinja2": "server",
            "prometheus_client": "server", "httpx": "server", "kubernetes": "kubernetes", "urllib3": "kubernetes"}


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone: then a BrokenPipeError was ours to
    write, not one of a socket or a subprocess the command talks to (a webhook, the service), which stays an error.
    poll reports POLLERR on a pipe without readers (Linux, the BSDs)."""
    import select

    try:
        fd = sys.stdout.fileno()
        p = select.poll()
        p.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (AttributeError, OSError, ValueError):  # no real file descriptor (a test runner's capture)
        return False


def _output_unread() -> None:
    """The reader of our output went away (`attribution jobs | head -1`): what it did not read is not wanted, so
    the command is done. Standard output goes to /dev/null, so that flushing it at exit raises nothing."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(0)


class _Group(click.Group):
    """Turns domain errors into one clear line on stderr and an exit code, never a traceback."""

    def make_context(self, *args, **kwargs) -> click.Context:
        try:  # `attribution --help | head -1`: the help is written while the arguments are read
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            _output_unread()

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            _output_unread()
        except RulePackError as exc:
            for p in exc.problems:
                click.echo(str(p), err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (InputError, ConfigError) as exc:
            click.echo(f"attribution: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except StoreError as exc:
            click.echo(f"attribution: database: {exc}", err=True)
            sys.exit(EXIT_STORE)
        except AttributionError as exc:
            click.echo(f"attribution: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except ModuleNotFoundError as exc:  # a slim (node) install running a command of the central side
            extra = EXTRA_OF.get((exc.name or "").split(".")[0])
            if extra is None:
                raise
            click.echo(f"attribution: this command needs attribution[{extra}] (no module {exc.name!r} here): "
                       f"pip install 'attribution[{extra}]'", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # a database error that reached the edge without being wrapped
            try:
                from sqlalchemy.exc import SQLAlchemyError
            except ImportError:
                raise exc from None
            if not isinstance(exc, SQLAlchemyError):
                raise
            orig = getattr(exc, "orig", None) or exc
            first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
            click.echo(f"attribution: database: {first}", err=True)
            sys.exit(EXIT_STORE)


@click.group(cls=_Group)
@click.version_option(package_name="attribution", prog_name="attribution", message="%(prog)s %(version)s")
@click.option("--rules", "rules_dir", type=click.Path(path_type=Path), default=None, envvar="ATTRIBUTION_RULES",
              help="Rule pack directory (default: the rules shipped with attribution).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
              help="Configuration file (default: $ATTRIBUTION_CONFIG, /etc/attribution/config.yaml, "
                   "~/.config/attribution/config.yaml).")
@click.pass_context
def main(ctx: click.Context, rules_dir: Path | None, config_path: Path | None) -> None:
    """attribution: for every failed GPU training job, what actually broke."""
    ctx.obj = {"rules_dir": rules_dir, "config_path": config_path}


def ruleset_of(ctx: click.Context):
    """The rule pack, from the compiled cache when it holds this pack (rulepack/cache.py: keyed by the pack's
    digest, so an edited pack is loaded and validated again), else loaded and then cached."""
    from attribution.rulepack.cache import default_cache_dir, rules_and_saver

    obj = ctx.find_root().obj
    if obj.get("ruleset") is None:
        rules_dir = obj.get("rules_dir") or settings_of(ctx).rules_dir
        obj["ruleset"], save = rules_and_saver(rules_dir, default_cache_dir())
        ctx.find_root().call_on_close(save)  # after the command: with what it compiled on the way
    return obj["ruleset"]


def settings_of(ctx: click.Context):
    from attribution.config import load_settings

    obj = ctx.find_root().obj
    if obj.get("settings") is None:
        obj["settings"] = load_settings(obj.get("config_path"))
    return obj["settings"]


def _register() -> None:
    """Each module of this package adds its commands to `main` when imported."""
    import importlib
    import pkgutil

    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if not mod.startswith("_"):
            importlib.import_module(f"{__name__}.{mod}")


_register()
