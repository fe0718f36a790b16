"""Credentials read from files that only their owner may read (a database password, a service token, a webhook
URL), and the one place that takes them out of what may be said: `Masker` for messages and exceptions, `origin`
for a URL that may carry one, `hide_urls_in_logs` for an HTTP client's own log lines."""

from __future__ import annotations

import base64
import logging
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, quote_plus, urlsplit

from attribution.errors import ConfigError

__all__ = ["MASK", "Masker", "hide_urls_in_logs", "origin", "read_secret"]

#: What a credential becomes in a message.
MASK = "[secret]"


def read_secret(path: str | Path) -> str:
    """A credential from a file that only its owner may read; anything else is refused."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"{p}: credentials file does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read credentials file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{p}: credentials file is not a regular file")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{p}: credentials file is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                          f"run: chmod 600 {p}")
    try:
        return p.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read credentials file: {exc.strerror or exc}") from None


def origin(url: str) -> str:
    """scheme://host[:port] of a URL: what a message may say of where a request went (a webhook URL's path is its
    credential, a URL's user:password one too)."""
    try:
        parts = urlsplit(str(url))
        port = parts.port
    except ValueError:
        return "(a URL that does not parse)"
    if not parts.scheme or not parts.hostname:
        return "(not a URL)"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}{':' + str(port) if port else ''}"


def _forms(secret: str) -> set[str]:
    """The ways a credential can be written in text a server or a library echoes: as it is, URL-quoted, in a
    JSON string, base64 (an Authorization: Basic value); of a URL, also its path and query and its password."""
    s = secret.strip()
    if not s:
        return set()
    forms = {s, quote(s, safe=""), quote(s, safe="/:@"), quote_plus(s), s.replace("/", "\\/"),
             repr(s)[1:-1], base64.b64encode(s.encode()).decode("ascii")}
    try:
        parts = urlsplit(s)
        password = parts.password
    except ValueError:
        parts, password = None, None
    if parts is not None and parts.scheme and parts.netloc:
        rest = s[len(f"{parts.scheme}://{parts.netloc}"):]
        if rest.strip("/?#"):
            forms |= {rest, rest.rstrip("/"), quote(rest, safe="/"), rest.split("?", 1)[0]}
        if parts.query:
            forms.add(parts.query)
        if password:
            forms |= {password, quote(password, safe="")}
    return {f for f in forms if f.strip("/?#")}


@dataclass(frozen=True)
class Masker:
    """Every form of a client's credentials, and `mask(text)`: the text with each replaced by [secret]. A client
    that read a credential from a file keeps one and passes every message and error it makes through it."""

    forms: tuple[str, ...] = ()

    @classmethod
    def of(cls, *secrets: str | None) -> Masker:
        found: set[str] = set()
        for s in secrets:
            if s:
                found |= _forms(s)
        return cls(tuple(sorted(found, key=lambda f: (-len(f), f))))

    def __add__(self, other: Masker) -> Masker:
        return Masker(tuple(sorted(set(self.forms) | set(other.forms), key=lambda f: (-len(f), f))))

    def mask(self, text: object) -> str:
        out = str(text)
        for f in self.forms:
            out = out.replace(f, MASK)
        return out


class UrlsAsOrigins(logging.Filter):
    """Rewrites the URLs among a log record's arguments to their origin (httpx logs every request's full URL at
    INFO: `HTTP Request: POST <url> "HTTP/1.1 200 OK"`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(origin(a) if _is_url(a) else a for a in record.args)
        return True


def _is_url(value: object) -> bool:
    if not (isinstance(value, str) or type(value).__name__ == "URL"):
        return False
    return str(value).startswith(("http://", "https://"))


def hide_urls_in_logs(logger: str) -> None:
    """Make the log records of `logger` (an HTTP client library's) name only the origin of each URL. Idempotent."""
    log = logging.getLogger(logger)
    if not any(isinstance(f, UrlsAsOrigins) for f in log.filters):
        log.addFilter(UrlsAsOrigins())
