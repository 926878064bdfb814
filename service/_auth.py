"""Optional bearer-token authentication: off when no token is configured.

Tokens are compared as SHA-256 digests in constant time; a request is known afterwards only by a
short hash of its token (the id that per-token limits count), so no token is ever stored or logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from pydantic import SecretStr

from ._errors import Unauthorized

__all__ = ["TokenCheck", "token_id"]


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
