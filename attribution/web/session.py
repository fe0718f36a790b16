"""The dashboard's session: a signed cookie that names a token of the tokens file, never the token itself.

A person signs in once by pasting a `read` token into the login form (a POST body, so the token never appears
in a URL, a proxy log or the browser history). The cookie holds the token's SHA-256 digest, an expiry and an
HMAC over both; the key is derived from the whole tokens file, so every worker process verifies the same
cookies, and replacing the tokens file signs everyone out. The cookie is HttpOnly, SameSite=Strict and limited
to /ui/.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from attribution.api.auth import Principal, TokenTable

COOKIE = "attribution_session"
PATH = "/ui/"
DEFAULT_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Sessions:
    tokens: TokenTable
    seconds: int = DEFAULT_SECONDS

    def _key(self) -> bytes:
        return hashlib.sha256(b"attribution-ui-session\0" + b"".join(sorted(self.tokens.by_digest))).digest()

    def _sign(self, payload: str) -> str:
        return hmac.new(self._key(), payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, token: str, now: float | None = None) -> str | None:
        """The cookie value for a token that has the `read` scope; None for any other."""
        principal = self.tokens.lookup(token)
        if principal is None or "read" not in principal.scopes:
            return None
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        payload = f"{digest}.{int((now or time.time()) + self.seconds)}"
        return f"{payload}.{self._sign(payload)}"

    def principal(self, cookie: str | None, now: float | None = None) -> Principal | None:
        """Who a cookie signs in, when it is genuine, unexpired and its token still in the tokens file."""
        if not cookie or cookie.count(".") != 2:
            return None
        digest, expires, sig = cookie.split(".")
        if not hmac.compare_digest(sig, self._sign(f"{digest}.{expires}")):
            return None
        try:
            if int(expires) < (now or time.time()):
                return None
            raw = bytes.fromhex(digest)
        except ValueError:
            return None
        found = self.tokens.by_digest.get(raw)
        return found if found is not None and "read" in found.scopes else None
