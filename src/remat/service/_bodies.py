"""Request bodies: a cap on each one, a time limit to arrive, and a budget for the bytes of all those being read.

A JSON body costs the API about fifteen times its size in memory while it is parsed and validated,
so one cap per body is not enough: ten concurrent 32 MiB solve requests took 4.9 GB (benchmarks/hardening.py). Each
authenticated request with a body reserves its size (its Content-Length, or the cap when it is
streamed in chunks) from the budget before anything reads it and gives it back when it has been
answered; one that finds no room within ``wait_s`` gets 503 with Retry-After.

Three rules keep a stalled or slow body from holding what other tenants need:

- Only a request :class:`~._auth.Authenticate` has let through (the API, ``/v1`` and ``/metrics``)
  reserves room. Any other path (the dashboard's sign-in form, the only public one that reads a
  body) may send at most :data:`PUBLIC_BODY_BYTES` and reserves nothing.
- One token's bodies hold at most ``max_per_token_bytes`` of the budget: its second stalled body
  waits for its first, while other tokens' requests pass (without authentication every caller is
  one tenant).
- Every body must arrive in full within ``timeout_s`` of the server's first read of it: past that,
  408 and the connection closed, and its room is given back.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from fastapi import HTTPException
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._auth import TOKEN_STATE
from ._problems import problem

__all__ = ["PUBLIC_BODY_BYTES", "BodyLimit"]

ROOM_POLL_S = 0.02
"""Seconds between two looks for room in the budget. (docs/tuning.md)"""
PUBLIC_BODY_BYTES = 4096
"""Most bytes of a body on a path that needs no token (the sign-in form: a token and a page address)."""
CLOSE = {"Connection": "close"}
"""Header of an answer given before the body was read in full: the connection cannot carry another request."""


class BodyLimit:
    """ASGI middleware: a body over its cap gets 413 (before it is read when its Content-Length says so), one
    slower than ``timeout_s`` gets 408; authenticated bodies being handled at once hold at most
    ``max_in_flight_bytes``, those of one token at most ``max_per_token_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_in_flight_bytes: int, max_per_token_bytes: int,
                 timeout_s: float, wait_s: float = 10.0, retry_after_s: int = 5) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_in_flight_bytes = max_in_flight_bytes
        self.max_per_token_bytes = max_per_token_bytes
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.by_token: Counter[str | None] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.get("state", {})
        authenticated = TOKEN_STATE in state
        cap = self.max_bytes if authenticated else PUBLIC_BODY_BYTES
        size = _announced_size(scope, cap)
        if size == 0:
            await self.app(scope, receive, send)
            return
        if size > cap:
            await problem(413, f"The request body has {size} bytes; this path accepts at most {cap}.",
                          instance=scope.get("path"), headers=CLOSE)(scope, receive, send)
            return
        if not authenticated:
            await self.app(scope, self._limited(receive, cap), send)
            return
        token = state[TOKEN_STATE]
        if not await self._reserve(token, size):
            await problem(503, "The server is reading as many request bodies as it can hold (or as many of this "
                               "token's as it may); retry shortly.", kind="bodies-in-flight",
                          instance=scope.get("path"), headers={"Retry-After": str(self.retry_after_s), **CLOSE}
                          )(scope, receive, send)
            return
        try:
            await self.app(scope, self._limited(receive, cap), send)
        finally:
            self.in_flight -= size
            self.by_token[token] -= size
            if not self.by_token[token]:
                del self.by_token[token]

    async def _reserve(self, token: str | None, size: int) -> bool:
        """Take ``size`` bytes of the budget and of the token's share (one event loop: no lock needed); False if
        none frees in time."""
        deadline = time.monotonic() + self.wait_s
        while (self.in_flight + size > self.max_in_flight_bytes
               or self.by_token[token] + size > self.max_per_token_bytes):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(ROOM_POLL_S)
        self.in_flight += size
        self.by_token[token] += size
        return True

    def _limited(self, receive: Receive, cap: int) -> Receive:
        """``receive``, raising 413 inside the app once the body grows past ``cap``, and 408 once it has taken
        longer than ``timeout_s`` to arrive; once the body is complete, ``receive`` as it is."""
        received = 0
        complete = False
        deadline = time.monotonic() + self.timeout_s

        async def limited() -> Message:
            nonlocal received, complete
            if complete:
                return await receive()  # only http.disconnect is left to come: no time limit on waiting for it
            try:
                message = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise HTTPException(408, f"The request body did not arrive in full within {self.timeout_s:g} s.",
                                    headers=CLOSE) from None
            received += len(message.get("body", b""))
            if received > cap:
                raise HTTPException(413, f"The request body is over the {cap} bytes this path accepts.",
                                    headers=CLOSE)
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return limited


def _announced_size(scope: Scope, cap: int) -> int:
    """The body's size by its Content-Length, ``cap`` for a body in chunks, 0 for none."""
    headers = Headers(scope=scope)
    length = headers.get("content-length")
    if length is not None:
        return int(length) if length.isdigit() else cap + 1
    return cap if "chunked" in headers.get("transfer-encoding", "").lower() else 0
