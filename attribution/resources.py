"""Where the data shipped with attribution lives: the rule pack, the migrations, the SQL views and Grafana
dashboards, the Slurm hooks and the example incidents.

In a checkout (or an editable install) they are the repository's top-level folders `rules/`, `migrations/`,
`sql/`, `hooks/` and `tests/incidents/`. An install from the wheel or the sdist carries copies under the package,
`attribution/_data/` (setup.py's build step makes them), found next to this module (the package is never zipped). Nothing here runs at
import time and nothing is cached: each call looks again (a few stats).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["NAMES", "data_dir", "rules_dir", "migrations_dir", "sql_dir", "hooks_dir", "incidents_dir",
           "grafana_dir", "where", "version"]

#: name -> (the folder in a checkout, relative to the repository; the folder under attribution/_data/)
NAMES: dict[str, tuple[str, str]] = {
    "rules": ("rules", "rules"),
    "migrations": ("migrations", "migrations"),
    "sql": ("sql", "sql"),
    "hooks": ("hooks", "hooks"),
    "incidents": ("tests/incidents", "incidents"),
}
#: a file each folder holds, telling a real copy from a stray folder of the same name
_MARKER = {"rules": "kinds.yaml", "migrations": "env.py", "sql": "grafana", "hooks": "epilog",
           "incidents": "."}


def _package_dir() -> Path:
    # the installed package's folder, as importlib.resources.files("attribution") gives it: attribution is never
    # zipped (it ships executables and PostgreSQL reads the SQL files), so it is this file's folder, without
    # importing importlib.resources and zipfile (~3 ms of a node hook's CPU)
    return Path(__file__).parent


def where(name: str) -> tuple[Path, str]:
    """The folder of one shipped resource and how it was found ("installed" or "checkout"). Raises KeyError for
    an unknown name, FileNotFoundError when neither copy exists (a broken install)."""
    checkout_rel, data_rel = NAMES[name]
    pkg = _package_dir()
    installed = pkg / "_data" / data_rel
    if (installed / _MARKER[name]).exists():
        return installed, "installed"
    checkout = pkg.parent / checkout_rel
    if (checkout / _MARKER[name]).exists() and (pkg.parent / "pyproject.toml").is_file():
        return checkout, "checkout"
    raise FileNotFoundError(f"attribution's {name} folder is missing (looked in {installed} and {checkout}): "
                            f"reinstall attribution")


def data_dir(name: str) -> Path:
    return where(name)[0]


def rules_dir() -> Path:
    """The rule pack shipped with attribution."""
    return data_dir("rules")


def migrations_dir() -> Path:
    return data_dir("migrations")


def sql_dir() -> Path:
    """The SQL views and example queries (sql/), with the Grafana dashboards in sql/grafana."""
    return data_dir("sql")


def grafana_dir() -> Path:
    return sql_dir() / "grafana"


def hooks_dir() -> Path:
    """The Slurm hooks (prolog, epilog, epilog-slurmctld) to point slurm.conf at."""
    return data_dir("hooks")


def incidents_dir() -> Path:
    """The example incident bundles `attribution demo` ingests."""
    return data_dir("incidents")


def version() -> str:
    """This package's version (pyproject.toml reads it from attribution.__version__: one place)."""
    from attribution import __version__

    return __version__
