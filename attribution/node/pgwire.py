"""A minimal PostgreSQL client (frontend/backend protocol v3) for the node hook's one statement: standard library
only (socket, struct, hashlib, hmac, base64; ssl imported only when the server accepts TLS).

Why not a driver: a node hook of a failed job must spend at most 100 ms of CPU delivering its report
(docs/performance.md, target 2), and importing psycopg costs ~115 ms on its own (pg8000 ~170 ms), where this
module and what it imports cost a few ms. It does just what the inbox needs: connect over a unix socket or TCP
(TLS per `sslmode`), authenticate (trust, cleartext password, md5, SCRAM-SHA-256), run one statement with text
parameters through the extended query protocol (Parse/Bind/Execute/Sync) and return the first row's first value.
Every wait is bounded by the caller's deadline; a server's ErrorResponse raises ServerError with its SQLSTATE.

URLs are the forms the node's `database.url` takes (libpq / SQLAlchemy): ``postgresql://user:pass@host:port/db``,
``postgresql+psycopg://...``, ``postgres://...``, the socket folder as ``?host=/run/postgresql`` (or an empty host:
libpq's default folder), ``?port=``, ``?sslmode=disable|allow|prefer|require|verify-ca|verify-full`` (default
prefer, as libpq: TLS when a TCP server offers it), ``?sslrootcert=FILE``, ``?application_name=``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import time
from urllib.parse import parse_qs, unquote, urlsplit

from attribution.frozen import Value

__all__ = ["Target", "parse_url", "Connection", "WireError", "ServerError", "connect"]

PROTOCOL = 196608  # 3.0
SSL_REQUEST = 80877103
DEFAULT_SOCKET_DIR = "/run/postgresql"
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: SQLSTATE classes meaning "this payload can never be stored": data exception, integrity, program limit
PERMANENT_CLASSES = ("22", "23", "54")
#: the server is busy or starting, or full: worth another try while time remains
RETRYABLE = ("53300", "57P03", "57P01", "40001", "40P01", "55P03")


class WireError(Exception):
    """The server could not be reached, spoke out of turn, or did not answer in time."""


class ServerError(WireError):
    """An ErrorResponse: `sqlstate`, `severity`, `message` and every field by its code letter."""

    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        self.sqlstate = fields.get("C", "")
        self.severity = fields.get("V") or fields.get("S", "ERROR")
        self.message = fields.get("M", "")
        super().__init__(f"{self.severity} {self.sqlstate}: {self.message}")

    @property
    def permanent(self) -> bool:
        return self.sqlstate[:2] in PERMANENT_CLASSES

    @property
    def retryable(self) -> bool:
        return self.sqlstate in RETRYABLE or self.sqlstate.startswith("08")


class Target(Value):
    """Where and as whom the node connects: one libpq URL taken apart."""

    host: str  # a host name or address, or a unix socket folder (starts with /)
    port: int
    user: str
    dbname: str
    password: str | None = None
    sslmode: str = "prefer"
    sslrootcert: str | None = None
    application_name: str | None = None

    @property
    def is_socket(self) -> bool:
        return self.host.startswith("/")

    def describe(self) -> str:
        """Where, for messages: never the password."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"


def parse_url(url: str, password: str | None = None) -> Target:
    """A Target from a libpq / SQLAlchemy URL (module doc). `password` (from the password file) wins over one in
    the URL. Raises ValueError naming what is wrong."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL (scheme {parts.scheme!r})")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = set(query) - {"host", "port", "sslmode", "sslrootcert", "application_name", "user", "password",
                            "dbname", "connect_timeout"}
    if unknown:
        raise ValueError(f"URL parameter(s) this client does not support: {', '.join(sorted(unknown))}")
    netloc = parts.netloc.rpartition("@")[2]
    host = netloc[1:netloc.index("]")] if netloc.startswith("[") else netloc.partition(":")[0]  # as written
    host = query.get("host") or unquote(host) or DEFAULT_SOCKET_DIR
    if "," in host:
        raise ValueError("several hosts in one URL are not supported")
    try:
        port = int(query.get("port") or parts.port or 5432)
    except ValueError:
        raise ValueError("the port is not a number") from None
    user = query.get("user") or unquote(parts.username or "") or _os_user()
    dbname = query.get("dbname") or unquote(parts.path.lstrip("/")) or user
    sslmode = query.get("sslmode") or "prefer"
    if sslmode not in SSLMODES:
        raise ValueError(f"sslmode {sslmode!r} is not one of {', '.join(SSLMODES)}")
    if password is None:
        password = query.get("password") or (unquote(parts.password) if parts.password is not None else None)
    return Target(host, port, user, dbname, password, sslmode, query.get("sslrootcert"),
                  query.get("application_name"))


def _os_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


class Connection:
    """One authenticated session. Use `connect()`; close() sends Terminate."""

    def __init__(self, sock, target: Target, deadline: float) -> None:
        self._sock = sock
        self._target = target
        self.deadline = deadline
        self._buf = b""
        self.parameters: dict[str, str] = {}
        self.auth_method = "trust"  # what the server asked for: trust, password, md5 or scram-sha-256

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._sock.settimeout(0.2)
            self._sock.sendall(b"X\x00\x00\x00\x04")
        except OSError:
            pass
        finally:
            self._sock.close()

    # -- the wire ----------------------------------------------------------------------------------------------

    def _wait(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WireError(f"{self._target.describe()}: no answer before the deadline")
        self._sock.settimeout(left)

    def send(self, data: bytes) -> None:
        self._wait()
        try:
            self._sock.sendall(data)
        except socket.timeout:
            raise WireError(f"{self._target.describe()}: timed out sending") from None
        except OSError as exc:
            raise WireError(f"{self._target.describe()}: {exc}") from None

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._wait()
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buf)))
            except socket.timeout:
                raise WireError(f"{self._target.describe()}: no answer before the deadline") from None
            except OSError as exc:
                raise WireError(f"{self._target.describe()}: {exc}") from None
            if not chunk:
                raise WireError(f"{self._target.describe()}: the server closed the connection")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def message(self) -> tuple[bytes, bytes]:
        """The next backend message (type, body); NoticeResponse and ParameterStatus are consumed here."""
        while True:
            kind, length = struct.unpack("!cI", self._read(5))
            if length < 4 or length > 1 << 30:
                raise WireError(f"{self._target.describe()}: not a PostgreSQL server (message length {length})")
            body = self._read(length - 4)
            if kind == b"N":
                continue
            if kind == b"S":
                k, _, v = body.rstrip(b"\0").partition(b"\0")
                self.parameters[k.decode()] = v.decode(errors="replace")
                continue
            return kind, body

    def _until_ready(self) -> None:
        """Skip to ReadyForQuery (after an error)."""
        while self.message()[0] != b"Z":
            pass

    # -- the one statement -------------------------------------------------------------------------------------

    def query_one(self, sql: str, *params: str | None):
        """Run `sql` with text parameters ($1, ...) as one extended-query exchange; the first column of the first
        row as text (None without a row or for NULL). Raises ServerError with the server's SQLSTATE."""
        body = b"\0" + sql.encode() + b"\0" + struct.pack("!H", 0)
        msgs = [_msg(b"P", body)]
        bind = [b"\0\0", struct.pack("!HH", 0, len(params))]
        for p in params:
            if p is None:
                bind.append(struct.pack("!i", -1))
            else:
                data = p.encode("utf-8")
                bind.append(struct.pack("!i", len(data)) + data)
        bind.append(struct.pack("!H", 0))
        msgs += [_msg(b"B", b"".join(bind)), _msg(b"E", b"\0" + struct.pack("!I", 0)), _msg(b"S", b"")]
        self.send(b"".join(msgs))
        value, error = None, None
        got_row = False
        while True:
            kind, body = self.message()
            if kind == b"D" and not got_row:
                got_row = True
                (ncols,) = struct.unpack("!H", body[:2])
                if ncols:
                    (n,) = struct.unpack("!i", body[2:6])
                    value = None if n < 0 else body[6:6 + n].decode("utf-8")
            elif kind == b"E":
                error = ServerError(_fields(body))
            elif kind == b"Z":
                break
        if error is not None:
            raise error
        return value


def _msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _fields(body: bytes) -> dict[str, str]:
    out = {}
    for part in body.split(b"\0"):
        if part:
            out[chr(part[0])] = part[1:].decode("utf-8", "replace")
    return out


def connect(target: Target, deadline: float, options: str | None = None, application_name: str = "attribution-node",
            connect_timeout: float | None = None) -> Connection:
    """An authenticated connection, or WireError / ServerError (a refused login carries its SQLSTATE: 28P01 a
    wrong password, 28000 no pg_hba entry, 53300 too many connections). `options` is the startup packet's
    `options` (`-c statement_timeout=...`)."""
    connect_by = deadline if connect_timeout is None else min(deadline, time.monotonic() + connect_timeout)
    left = connect_by - time.monotonic()
    if left <= 0:
        raise WireError(f"{target.describe()}: no time left to connect")
    try:
        if target.is_socket:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(left)
            sock.connect(os.path.join(target.host, f".s.PGSQL.{target.port}"))
        else:
            host = target.host.encode("ascii") if target.host.isascii() else target.host  # no idna codec (httppost)
            sock = socket.create_connection((host, target.port), timeout=left)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except socket.timeout:
        raise WireError(f"{target.describe()}: timed out connecting") from None
    except OSError as exc:
        raise WireError(f"{target.describe()}: {exc.strerror or exc}") from None
    conn = Connection(sock, target, connect_by)
    try:
        if not target.is_socket and target.sslmode != "disable":
            conn = _tls(conn, target)
        params = {"user": target.user, "database": target.dbname, "client_encoding": "UTF8",
                  "application_name": target.application_name or application_name}
        if options:
            params["options"] = options
        body = struct.pack("!I", PROTOCOL) + b"".join(k.encode() + b"\0" + v.encode() + b"\0"
                                                      for k, v in params.items()) + b"\0"
        conn.send(struct.pack("!I", len(body) + 4) + body)
        conn.auth_method = _authenticate(conn, target)
        while True:  # BackendKeyData, then ReadyForQuery
            kind, body = conn.message()
            if kind == b"Z":
                break
            if kind == b"E":
                raise ServerError(_fields(body))
    except BaseException:
        conn.close()
        raise
    conn.deadline = deadline
    return conn


def _tls(conn: Connection, target: Target) -> Connection:
    """SSLRequest; wrap the socket when the server accepts (ssl is imported only then, or when required)."""
    conn.send(struct.pack("!II", 8, SSL_REQUEST))
    answer = conn._read(1)
    if answer == b"N":
        if target.sslmode in ("require", "verify-ca", "verify-full"):
            raise WireError(f"{target.describe()}: the server does not accept TLS (sslmode {target.sslmode})")
        return conn
    if answer != b"S":
        raise WireError(f"{target.describe()}: not a PostgreSQL server (answer {answer!r} to SSLRequest)")
    import ssl

    if target.sslmode in ("verify-ca", "verify-full"):
        ctx = ssl.create_default_context(cafile=target.sslrootcert)
        ctx.check_hostname = target.sslmode == "verify-full"
    else:  # allow, prefer, require: encrypted, not verified (libpq's meaning without a root certificate)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    conn._wait()
    try:
        wrapped = ctx.wrap_socket(conn._sock, server_hostname=target.host)
    except (ssl.SSLError, OSError) as exc:
        raise WireError(f"{target.describe()}: TLS: {exc}") from None
    out = Connection(wrapped, target, conn.deadline)
    return out


def _authenticate(conn: Connection, target: Target) -> str:
    scram = None
    method = "trust"
    while True:
        kind, body = conn.message()
        if kind == b"E":
            raise ServerError(_fields(body))
        if kind != b"R":
            raise WireError(f"{target.describe()}: unexpected message {kind!r} during authentication")
        (code,) = struct.unpack("!I", body[:4])
        if code == 0:
            return method
        if code in (3, 5, 10) and target.password is None:
            raise WireError(f"{target.describe()}: the server asks for a password and none is configured "
                            f"(database.password_file)")
        if code == 3:  # cleartext
            method = "password"
            conn.send(_msg(b"p", target.password.encode() + b"\0"))
        elif code == 5:  # md5: md5(md5(password + user) + salt)
            method = "md5"
            inner = hashlib.md5((target.password + target.user).encode()).hexdigest()
            outer = hashlib.md5(inner.encode() + body[4:8]).hexdigest()
            conn.send(_msg(b"p", b"md5" + outer.encode() + b"\0"))
        elif code == 10:  # SASL: the mechanisms the server offers
            mechanisms = [m.decode() for m in body[4:].split(b"\0") if m]
            if "SCRAM-SHA-256" not in mechanisms:
                raise WireError(f"{target.describe()}: no supported SASL mechanism in {mechanisms}")
            method = "scram-sha-256"
            scram = _Scram(target.password)
            first = scram.client_first()
            conn.send(_msg(b"p", b"SCRAM-SHA-256\0" + struct.pack("!I", len(first)) + first))
        elif code == 11 and scram is not None:
            conn.send(_msg(b"p", scram.client_final(body[4:])))
        elif code == 12 and scram is not None:
            scram.verify(body[4:])
        else:
            raise WireError(f"{target.describe()}: unsupported authentication request {code}")


class _Scram:
    """SCRAM-SHA-256 without channel binding (RFC 5802, RFC 7677), as libpq does it for a non-TLS or a
    TLS-without-binding connection. The user name is in the startup packet: the SCRAM one is empty."""

    def __init__(self, password: str) -> None:
        self.password = password.encode("utf-8")  # SASLprep is the identity for the ASCII passwords we make
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.first_bare = f"n=,r={self.nonce}"
        self.server_signature = b""

    def client_first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(kv.split("=", 1) for kv in text.split(","))
        nonce, salt, rounds = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self.nonce):
            raise WireError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", self.password, salt, rounds)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored_key = hashlib.sha256(client_key).digest()
        final_bare = f"c=biws,r={nonce}"
        auth = f"{self.first_bare},{text},{final_bare}".encode()
        signature = hmac.digest(stored_key, auth, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        self.server_signature = hmac.digest(server_key, auth, "sha256")
        return f"{final_bare},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(kv.split("=", 1) for kv in server_final.decode().split(","))
        if "e" in attrs:
            raise WireError(f"SCRAM: the server refused: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self.server_signature):
            raise WireError("SCRAM: the server's signature is wrong (not the server that knows the password)")
