"""Every error becomes an ``application/problem+json`` document (RFC 9457), in one place.

remat's error classes map to HTTP statuses through one table; request validation errors name the
field (and the node, for a graph); HTTP errors (404 route, 405, 413) keep their status; anything
unexpected is a 500 whose details stay in the server log.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from remat.schedules import (
    BackendUnavailable,
    InvalidGraph,
    InvalidPlan,
    InvalidRequest,
    InvalidSchedule,
    RematError,
    SolverFailed,
    StrategyNotApplicable,
    UnknownStrategy,
)

from ._errors import JobNotFound, QueueFull, StoreQuota, TooManyJobs, Unauthorized

__all__ = ["PROBLEM_RESPONSES", "STORE_UNREACHABLE", "install_problem_handlers", "problem"]

log = logging.getLogger("remat.service")

MEDIA_TYPE = "application/problem+json"

_STATUS: dict[type[RematError], int] = {
    InvalidGraph: 422,
    InvalidRequest: 422,
    InvalidPlan: 422,
    InvalidSchedule: 422,
    UnknownStrategy: 422,
    StrategyNotApplicable: 422,
    BackendUnavailable: 422,
    JobNotFound: 404,
    Unauthorized: 401,
    TooManyJobs: 429,
    StoreQuota: 413,
    QueueFull: 503,
    SolverFailed: 500,
}
_TITLES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 413: "Content Too Large", 422: "Unprocessable Content", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}
_ATTRIBUTES = ("node", "field", "step", "stage", "job_id")
SHOWN_CHARS = 100
"""Most characters of a request's own text (a field's or node's name) a problem document repeats."""
STORE_UNREACHABLE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError,
                                                  redis.exceptions.OutOfMemoryError, sqlite3.OperationalError)
"""Errors of a job store that is down, locked or full (Redis at its maxmemory): 503 with Retry-After, not a 500."""

_PROBLEM_SCHEMA = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {"type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
                   "detail": {"type": "string"}, "instance": {"type": "string"}},
    "additionalProperties": True,
}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": _TITLES[code], "content": {MEDIA_TYPE: {"schema": _PROBLEM_SCHEMA}}}
    for code in (401, 404, 413, 422, 429, 503)
}
"""OpenAPI ``responses`` for the problem documents the API may answer with."""


def problem(status: int, detail: str, *, kind: str | None = None, instance: str | None = None,
            headers: Mapping[str, str] | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response; ``kind`` names the problem type (``invalid-graph``)."""
    title = _TITLES.get(status, "Error")
    body = {"type": f"urn:remat:problem:{kind or title.lower().replace(' ', '-')}", "title": title,
            "status": status, "detail": detail}
    if instance:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    return ProblemResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=dict(headers or {}))


class ProblemResponse(JSONResponse):
    """A problem document that always encodes: text no response can carry (a lone surrogate a request sent, and
    an error repeated) is written as ``?``, never a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode("utf-8", "replace")


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RematError, _remat_error)
    for unreachable in STORE_UNREACHABLE:
        app.add_exception_handler(unreachable, _store_unreachable)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


def _status_of(error: RematError) -> int:
    for cls in type(error).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500


async def _remat_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RematError)
    status = _status_of(exc)
    headers = {}
    if isinstance(exc, (QueueFull, TooManyJobs)):
        headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="remat"'
    kind = _kebab(type(exc).__name__)
    extra = {a: getattr(exc, a) for a in _ATTRIBUTES if getattr(exc, a, None) is not None}
    return problem(status, str(exc), kind=kind, instance=request.url.path, headers=headers, **extra)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [_describe(e, exc.body) for e in exc.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        return problem(400, f"The body is not valid JSON: {errors[0]['msg']}.", kind="invalid-json",
                       instance=request.url.path)
    first = errors[0]
    detail = "; ".join(e["message"] for e in errors[:5]) + (f"; and {len(errors) - 5} more" if len(errors) > 5 else "")
    return problem(422, detail, kind="invalid-request", instance=request.url.path, field=first["field"],
                   node=first.get("node"), errors=errors)


def _describe(error: Mapping[str, Any], body: Any) -> dict[str, Any]:
    """One validation error as ``{loc, field, node, type, msg, message}``; the node by id when known (in a
    request's ``graph``, or in any graph of its ``graphs``)."""
    loc = [*error.get("loc", ()), *(error.get("ctx") or {}).get("at", ())]  # ctx["at"]: where below its loc
    loc = [shown(p) if isinstance(p, str) else p for p in loc[loc[:1] == ["body"]:]]
    out: dict[str, Any] = {"loc": loc, "type": error.get("type", ""), "msg": error.get("msg", "")}
    out["field"] = ".".join(str(p) for p in loc if not isinstance(p, int)) or None
    where = out["field"] or "the body"
    at = next((i for i in range(len(loc) - 2) if loc[i:i + 2] == ["graph", "nodes"] and isinstance(loc[i + 2], int)),
              None)
    if at is not None:
        node = _node_id(body, loc[:at + 3])
        out["node"] = node
        field = ".".join(str(p) for p in loc[at + 3:]) or "node"
        name = f"'{node}' (#{loc[at + 2]})" if node else f"#{loc[at + 2]}"
        graph = "graph" if at == 0 else ".".join(str(p) for p in loc[:at + 1])
        where = f"{graph} node {name}: field {field!r}"
    out["message"] = f"{where}: {out['msg']}"
    return out


def _node_id(body: Any, path: list[Any]) -> str | None:
    """The ``id`` of the node at ``path`` in the request body, when it has a usable one."""
    try:
        for step in path:
            body = body[step]
        node_id = body["id"]
    except (KeyError, IndexError, TypeError):
        return None
    return shown(node_id) if isinstance(node_id, str) and node_id else None


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as a problem document may show it: lone surrogates written as escapes (no response could encode
    them), at most ``limit`` characters (a request's own long names are not echoed whole)."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= limit else f"{safe[:limit]}... ({len(text)} characters)"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "Error")
    return problem(exc.status_code, detail, instance=request.url.path, headers=exc.headers)


async def _store_unreachable(request: Request, exc: Exception) -> JSONResponse:
    log.error("job store unreachable on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return problem(503, "The job store cannot be reached, is busy or is full; retry shortly.", kind="store-unreachable",
                   instance=request.url.path, headers={"Retry-After": "5"})


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem(500, "An unexpected error occurred; the server log has the details.", instance=request.url.path)


def _kebab(name: str) -> str:
    return "".join(f"-{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))
