"""Small domain exceptions. Only the CLI, the hooks and the API turn them into exit codes or HTTP statuses."""

from __future__ import annotations


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
    """A rule pack with problems; `problems` holds every one as 'path:line: message'."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class StoreError(AttributionError):
    """The database could not be reached or refused the work. `permanent`: it refused this data itself (a value
    out of range, a limit), so trying the same work again can never succeed."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        self.permanent = permanent
        super().__init__(message)


class ConfigError(AttributionError):
    """A configuration file or setting that cannot be used."""
