"""BodyLimit: each body capped, and the bytes of all bodies being handled at once within a budget."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from remat.service._bodies import BodyLimit


def _run(make: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run`` of ``make()`` in a thread of its own (a test before may leave a loop running in this one)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(asyncio.run(make())))  # type: ignore[arg-type]
    thread.start()
    thread.join()
    return out[0]


def _scope(length: int | None, chunked: bool = False) -> dict:
    headers = [(b"content-length", str(length).encode())] if length is not None else []
    if chunked:
        headers.append((b"transfer-encoding", b"chunked"))
    return {"type": "http", "method": "POST", "path": "/v1/solve", "headers": headers}


async def _call(limit: BodyLimit, scope: dict, body: bytes = b"") -> tuple[int, dict]:
    """Run one request through ``limit``; its status and JSON answer."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await limit(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def test_a_body_waits_for_room_and_is_refused_when_none_frees_in_time():
    release = asyncio.Event()
    handled: list[int] = []

    async def app(scope: dict, receive, send) -> None:
        await receive()
        handled.append(limit.in_flight)
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    limit = BodyLimit(app, max_bytes=100, max_in_flight_bytes=150, wait_s=0.3)

    async def scenario() -> list[tuple[int, dict]]:
        first = asyncio.create_task(_call(limit, _scope(100), b"x" * 100))
        await asyncio.sleep(0.05)
        refused = await _call(limit, _scope(100), b"x" * 100)  # 100 + 100 > 150: waits 0.3 s, then 503
        small = asyncio.create_task(_call(limit, _scope(50), b"x" * 50))  # fits beside the first
        await asyncio.sleep(0.05)
        release.set()
        return [await first, refused, await small]

    (first, _), (refused, problem), (small, _) = _run(scenario)
    assert (first, refused, small) == (200, 503, 200) and problem["type"] == "urn:remat:problem:bodies-in-flight"
    assert handled == [100, 150] and limit.in_flight == 0


def test_bodies_over_the_cap_are_refused_before_they_are_read_and_chunked_ones_count_as_the_cap():
    async def app(scope: dict, receive, send) -> None:
        raise AssertionError("the app never sees it")

    limit = BodyLimit(app, max_bytes=100, max_in_flight_bytes=150, wait_s=0.1)
    status, problem = _run(lambda: _call(limit, _scope(101)))
    assert status == 413 and "101 bytes" in problem["detail"]
    assert _run(lambda: _call(limit, _scope("abc")))[0] == 413  # type: ignore[arg-type]

    async def holding() -> tuple[int, dict]:
        limit.in_flight = 60  # another request holds 60 bytes: a chunked body reserves the cap, 100
        return await _call(limit, _scope(None, chunked=True))

    assert _run(holding)[0] == 503
