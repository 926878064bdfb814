"""Request bodies: a cap on each one, and a budget for the bytes of all those being handled at once.

A JSON body costs the API about fifteen times its size in memory while it is parsed and validated,
so one cap per body is not enough: ten concurrent 32 MiB solve requests took 4.9 GB. Each request
with a body reserves its size (its Content-Length, or the cap when it is streamed in chunks) from the
budget before anything reads it and gives it back when it has been answered; one that finds no room
within ``wait_s`` gets 503 with Retry-After. The token is checked before (Authenticate is outside),
so only authenticated requests ever hold room.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import HTTPException
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._problems import problem

__all__ = ["BodyLimit"]

ROOM_POLL_S = 0.02
"""Seconds between two looks for room in the budget."""


class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` gets 413 (before it is read when its Content-Length says so);
    bodies being handled at once hold at most ``max_in_flight_bytes``."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_in_flight_bytes: int, wait_s: float = 10.0,
                 retry_after_s: int = 5) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_in_flight_bytes = max_in_flight_bytes
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        size = _announced_size(scope, self.max_bytes) if scope["type"] == "http" else 0
        if size == 0:
            await self.app(scope, receive, send)
            return
        if size > self.max_bytes:
            await problem(413, f"The request body has {size} bytes; this server accepts at most {self.max_bytes}.",
                          instance=scope.get("path"))(scope, receive, send)
            return
        if not await self._reserve(size):
            await problem(503, "The server is reading as many request bodies as it can hold; retry shortly.",
                          kind="bodies-in-flight", instance=scope.get("path"),
                          headers={"Retry-After": str(self.retry_after_s)})(scope, receive, send)
            return
        try:
            await self.app(scope, self._limited(receive), send)
        finally:
            self.in_flight -= size

    async def _reserve(self, size: int) -> bool:
        """Take ``size`` bytes of the budget (one event loop: no lock needed); False if none frees in time."""
        deadline = time.monotonic() + self.wait_s
        while self.in_flight + size > self.max_in_flight_bytes:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(ROOM_POLL_S)
        self.in_flight += size
        return True

    def _limited(self, receive: Receive) -> Receive:
        """``receive``, raising 413 inside the app once the body grows past ``max_bytes``."""
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, f"The request body is over the {self.max_bytes} bytes this server accepts.")
            return message

        return limited


def _announced_size(scope: Scope, cap: int) -> int:
    """The body's size by its Content-Length, ``cap`` for a body in chunks, 0 for none."""
    headers = Headers(scope=scope)
    length = headers.get("content-length")
    if length is not None:
        return int(length) if length.isdigit() else cap + 1
    return cap if "chunked" in headers.get("transfer-encoding", "").lower() else 0
