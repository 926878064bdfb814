"""Stalled request bodies against a real `remat serve` (uvicorn): headers sent, the body never.

Nothing without a token may hold the bytes the API keeps for bodies being read; a token's stalled bodies hold
only that token's share; and every stalled body is answered (408, or 413 before it is read) or its connection
closed once the body timeout has passed.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from factories import chain
from processes import Processes, Server

ALICE = "alice-" + "a" * 26
BOB = "bob-" + "b" * 28
BODY_TIMEOUT_S = 3.0
STALLED_BYTES = 32 * 2**20
"""The largest body the server accepts by default: a stalled one would reserve all of it."""


@pytest.fixture
def server(processes: Processes) -> Server:
    return processes.server(REMAT_TOKENS=f"{ALICE},{BOB}", REMAT_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S))


def _stall(port: int, path: str, token: str | None, *, chunked: bool) -> socket.socket:
    """A connection that sends a request's headers announcing a 32 MiB body (or a chunked one), and no body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    size = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {STALLED_BYTES}"
    kind = "application/json" if path.startswith("/v1") else "application/x-www-form-urlencoded"
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {kind}\r\n{auth}{size}\r\n\r\n".encode())
    return s


def _submit(server: Server) -> tuple[float, int]:
    """Bob's small solve, answered without waiting for its result: (seconds it took, status)."""
    body = {"graph": chain(6).to_json(), "budget_ratio": 1.0, "strategy": "checkpoint-all", "wait_s": 0}
    started = time.perf_counter()
    r = httpx.post(f"{server.url}/v1/solve", json=body, headers={"Authorization": f"Bearer {BOB}"}, timeout=30)
    return time.perf_counter() - started, r.status_code


def _answer(s: socket.socket) -> bytes:
    """What the server sends on a stalled connection before it closes it (b"" if it only closes it)."""
    try:
        return s.recv(64)
    except ConnectionResetError:
        return b""


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("path", "token"), [("/dashboard/login", None), ("/v1/solve", ALICE)],
                         ids=["login-without-token", "solve-of-another-token"])
def test_two_stalled_bodies_do_not_delay_another_tokens_submission(server: Server, path: str, token: str | None,
                                                                    chunked: bool):
    assert _submit(server)[1] in (200, 202)  # warm: the first request of a process imports what it needs
    stalled = [_stall(server.port, path, token, chunked=chunked) for _ in range(2)]
    try:
        time.sleep(0.5)  # the server has read both requests' headers and waits for their bodies
        took, status = _submit(server)
        assert status in (200, 202) and took < 1.0, (status, took)

        started = time.monotonic()
        answers = [_answer(s) for s in stalled]
        waited = time.monotonic() - started
    finally:
        for s in stalled:
            s.close()
    assert all(a == b"" or a.startswith((b"HTTP/1.1 408", b"HTTP/1.1 413")) for a in answers), answers
    assert waited < 2 * BODY_TIMEOUT_S + 2, waited  # a token's second body waits for its first to time out
