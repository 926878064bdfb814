"""BodyLimit: each body capped and timed, the bytes of all bodies being handled at once within a budget, each
token's within its share, and nothing reserved for a request without a token."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastapi import HTTPException
from pydantic import ValidationError

from remat.service import Settings
from remat.service._auth import TOKEN_STATE
from remat.service._bodies import PUBLIC_BODY_BYTES, BodyLimit

UNCHECKED = object()
"""A request's token when Authenticate did not check it (a path that needs none)."""


def _run(make: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run`` of ``make()`` in a thread of its own (a test before may leave a loop running in this one)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(asyncio.run(make())))  # type: ignore[arg-type]
    thread.start()
    thread.join()
    return out[0]


def _scope(length: int | None, chunked: bool = False, token: object = "alice") -> dict:
    headers = [(b"content-length", str(length).encode())] if length is not None else []
    if chunked:
        headers.append((b"transfer-encoding", b"chunked"))
    state = {} if token is UNCHECKED else {TOKEN_STATE: token}
    return {"type": "http", "method": "POST", "path": "/v1/solve", "headers": headers, "state": state}


def _limit(app, **limits) -> BodyLimit:  # type: ignore[no-untyped-def]
    return BodyLimit(app, **{"max_bytes": 100, "max_in_flight_bytes": 150, "max_per_token_bytes": 150,
                             "timeout_s": 5.0, "wait_s": 0.3, **limits})


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

    limit = _limit(app)

    async def scenario() -> list[tuple[int, dict]]:
        first = asyncio.create_task(_call(limit, _scope(100), b"x" * 100))
        await asyncio.sleep(0.05)
        refused = await _call(limit, _scope(100, token="bob"), b"x" * 100)  # 100 + 100 > 150: waits 0.3 s, then 503
        small = asyncio.create_task(_call(limit, _scope(50, token="bob"), b"x" * 50))  # fits beside the first
        await asyncio.sleep(0.05)
        release.set()
        return [await first, refused, await small]

    (first, _), (refused, problem), (small, _) = _run(scenario)
    assert (first, refused, small) == (200, 503, 200) and problem["type"] == "urn:remat:problem:bodies-in-flight"
    assert handled == [100, 150] and limit.in_flight == 0


def test_bodies_over_the_cap_are_refused_before_they_are_read_and_chunked_ones_count_as_the_cap():
    async def app(scope: dict, receive, send) -> None:
        raise AssertionError("the app never sees it")

    limit = _limit(app, wait_s=0.1)
    status, problem = _run(lambda: _call(limit, _scope(101)))
    assert status == 413 and "101 bytes" in problem["detail"]
    assert _run(lambda: _call(limit, _scope("abc")))[0] == 413  # type: ignore[arg-type]

    async def holding() -> tuple[int, dict]:
        limit.in_flight = 60  # another request holds 60 bytes: a chunked body reserves the cap, 100
        return await _call(limit, _scope(None, chunked=True))

    assert _run(holding)[0] == 503


def test_a_tokens_bodies_hold_only_its_share_and_others_pass_beside_them():
    release = asyncio.Event()

    async def app(scope: dict, receive, send) -> None:
        await receive()
        if scope["state"][TOKEN_STATE] == "alice":
            await release.wait()  # alice's body is being handled (or stalls) until released
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    limit = _limit(app, max_in_flight_bytes=200, max_per_token_bytes=100, wait_s=0.3)

    async def scenario() -> list[tuple[int, dict]]:
        first = asyncio.create_task(_call(limit, _scope(100), b"x" * 100))
        await asyncio.sleep(0.05)
        second = await _call(limit, _scope(100), b"x" * 100)  # alice's share is full: waits 0.3 s, then 503
        bob = await _call(limit, _scope(100, token="bob"), b"x" * 100)  # at once, beside alice's first
        held = dict(limit.by_token)
        release.set()
        return [await first, second, bob, held]

    (first, _), (second, problem), (bob, _), held = _run(scenario)
    assert (first, second, bob) == (200, 503, 200) and problem["type"] == "urn:remat:problem:bodies-in-flight"
    assert held == {"alice": 100} and limit.in_flight == 0 and not limit.by_token


def test_a_request_without_a_checked_token_reserves_nothing_and_sends_at_most_the_sign_in_forms_bytes():
    seen: list[int] = []

    async def app(scope: dict, receive, send) -> None:
        await receive()
        seen.append(limit.in_flight)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    limit = _limit(app, max_bytes=10 * PUBLIC_BODY_BYTES, max_in_flight_bytes=10 * PUBLIC_BODY_BYTES,
                   max_per_token_bytes=10 * PUBLIC_BODY_BYTES)
    assert _run(lambda: _call(limit, _scope(100, token=UNCHECKED), b"x" * 100))[0] == 200
    status, problem = _run(lambda: _call(limit, _scope(PUBLIC_BODY_BYTES + 1, token=UNCHECKED)))
    assert status == 413 and f"at most {PUBLIC_BODY_BYTES}" in problem["detail"]
    assert seen == [0] and limit.in_flight == 0


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_gives_its_room_back():
    async def app(scope: dict, receive, send) -> None:
        try:
            await receive()
        except HTTPException as e:
            await send({"type": "http.response.start", "status": e.status_code, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

    async def never() -> dict:
        await asyncio.sleep(3600)
        return {}

    async def stalled(token: object) -> tuple[int, float]:
        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        started = asyncio.get_running_loop().time()
        await limit(_scope(100, token=token), never, send)
        return sent[0]["status"], asyncio.get_running_loop().time() - started

    limit = _limit(app, timeout_s=0.2)
    for token in ("alice", UNCHECKED):
        status, took = _run(lambda token=token: stalled(token))
        assert status == 408 and 0.2 <= took < 1.0 and limit.in_flight == 0 and not limit.by_token


def test_a_tokens_share_defaults_to_half_the_budget_and_holds_at_least_one_body():
    assert Settings().body_share_bytes == 32 * 2**20
    assert Settings(max_body_bytes=48 * 2**20).body_share_bytes == 48 * 2**20
    assert Settings(max_body_bytes_per_token=40 * 2**20).body_share_bytes == 40 * 2**20
    for share in (2**20, 128 * 2**20):  # below one body, above the whole budget
        with pytest.raises(ValidationError, match="max_body_bytes_per_token"):
            Settings(max_body_bytes_per_token=share)
