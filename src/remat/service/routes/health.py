"""Health (``/healthz``: the process answers), readiness (``/readyz``: store and executor work), metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from starlette.responses import Response

from .._deps import ServiceDep, require_token
from .._problems import problem

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
async def healthz() -> dict[str, str]:
    """The process is alive; checks nothing else, so it never fails while the process runs (it runs on the
    event loop, not in the thread pool that busy routes may fill)."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz", responses={503: {"description": "Not ready"}})
def readyz(service: ServiceDep) -> Any:
    """Ready to take jobs: the store answers and the executor runs."""
    try:
        service.store.ping()
    except Exception as e:
        return problem(503, f"The job store cannot be reached: {type(e).__name__}.", kind="not-ready")
    if not service.executor.ready():
        return problem(503, "The executor is not running.", kind="not-ready")
    return {"status": "ready"}


@router.get("/metrics", operation_id="metrics", response_class=Response,
            dependencies=[Depends(require_token)])
def metrics(service: ServiceDep) -> Response:
    """Prometheus metrics (behind the bearer token when authentication is on)."""
    return Response(service.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


