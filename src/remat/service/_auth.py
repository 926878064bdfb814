"""Optional bearer-token authentication: off when no token is configured.

Tokens are compared as SHA-256 digests in constant time; a request is known afterwards only by a
short hash of its token (the id that owns its jobs and that per-token limits count), so no token is
ever stored or logged. :class:`Authenticate` checks the API's requests from their headers alone,
before any body is read.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ._errors import Unauthorized
from ._problems import problem

__all__ = ["TOKEN_STATE", "Authenticate", "TokenCheck", "token_id"]

TOKEN_STATE = "remat_token"
"""Key of the request state under which :class:`Authenticate` leaves the caller's token id."""
API_PATHS = ("/v1/", "/metrics")
"""Paths (prefixes) that need a bearer token: the API and the metrics."""


def token_id(token: str) -> str:
    """A short, stable, non-reversible name for a token."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class TokenCheck:
    """Checks ``Authorization: Bearer <token>`` against the configured tokens."""

    def __init__(self, tokens: Sequence[SecretStr]) -> None:
        self._digests = [hashlib.sha256(t.get_secret_value().encode()).digest() for t in tokens]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def __call__(self, authorization: str | None) -> str | None:
        """The token's id, or None when authentication is off; Unauthorized otherwise."""
        if not self.enabled:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("This server requires a bearer token: send 'Authorization: Bearer <token>'.")
        digest = hashlib.sha256(token.encode()).digest()
        if not any(hmac.compare_digest(digest, known) for known in self._digests):
            raise Unauthorized("The bearer token is not valid for this server.")
        return token_id(token)


class Authenticate:
    """ASGI middleware: a request to the API (``API_PATHS``) without a valid token gets 401 at once.

    Only the ``Authorization`` header is read, so the body of a refused request is never received,
    parsed or buffered beyond what the server holds for any connection. An accepted request carries
    its token id in the request state (``TOKEN_STATE``; None when authentication is off).
    """

    def __init__(self, app: ASGIApp, check: TokenCheck) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(API_PATHS):
            try:
                token = self.check(Headers(scope=scope).get("authorization"))
            except Unauthorized as e:
                await problem(401, str(e), kind="unauthorized", instance=scope["path"],
                              headers={"WWW-Authenticate": 'Bearer realm="remat"'})(scope, receive, send)
                return
            scope.setdefault("state", {})[TOKEN_STATE] = token
        await self.app(scope, receive, send)
