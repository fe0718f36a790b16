"""Small domain exceptions. Only the CLI, the hooks and the API turn them into exit codes or HTTP statuses."""

from __future__ import annotations

from attribution.frozen import Value



class Problem(Value):
    """One problem found in an input (a rule pack, a configuration file): where, and what. Text only at the edge."""

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


class AttributionError(Exception):
    """Base of every error this package raises on purpose."""


class InputError(AttributionError):
    """Bad input the user can fix: names the file (and line) and the problem."""

    def __init__(self, path: str, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.message = message
        self.line = line
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {message}")


class RulePackError(AttributionError):
    """A rule pack with problems; `problems` holds every one (a `Problem`: path, line, message)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))


class PolicyError(RulePackError):
    """A drain policy that cannot be used: a kind that must never drain a node, an unknown kind, a twice-used id."""


class StoreError(AttributionError):
    """The database could not be reached or refused the work. `permanent`: it refused this data itself (a value
    out of range, a limit), so trying the same work again can never succeed."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        self.permanent = permanent
        super().__init__(message)


class TimeError(AttributionError):
    """A time or zone that cannot be understood (attribution.timeparse)."""


class SourceError(AttributionError):
    """A log or metric source answered with nothing a collector can use (collect.httpclient.HttpError, a Loki or
    Prometheus answer of the wrong shape). Collectors turn it into a coverage gap; it never aborts a verdict."""


class ConfigError(AttributionError):
    """A configuration file or setting that cannot be used; `problems` holds each problem of a configuration file
    (a `Problem`: file, line, message), one line each in the message."""

    def __init__(self, message: str, problems: "list[Problem] | tuple" = ()) -> None:
        self.problems = list(problems)
        super().__init__(message)
