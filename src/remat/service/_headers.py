"""Security headers on every response: no framing, no content sniffing, no referrer, and a content policy.

The dashboard's pages load their scripts and styles from this server only (``/dashboard/static/``)
and carry their data as JSON, so the policy allows no inline script, no other origin, no plugin and
no framing. Plotly and the pages set inline styles, which the policy allows. The interactive API
documentation (``/docs``, ``/redoc``) loads Swagger UI and ReDoc from a CDN with an inline script, so
it gets the other headers but not the content policy.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_POLICY", "SecurityHeaders"]

CONTENT_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                  "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
"""Content-Security-Policy of every response but the API documentation's pages."""
ALWAYS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}
"""Headers of every response."""
DOCS_PATHS = ("/docs", "/redoc")
"""Paths (prefixes) of the API documentation's pages, which load their scripts from a CDN."""


class SecurityHeaders:
    """ASGI middleware: adds :data:`ALWAYS` to every HTTP response, and :data:`CONTENT_POLICY` to all but the
    documentation's (a header the app set itself is kept)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = dict(ALWAYS)
        if not scope["path"].startswith(DOCS_PATHS):
            extra["Content-Security-Policy"] = CONTENT_POLICY

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in extra.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
