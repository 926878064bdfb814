"""``POST /v1/solve``: the result when it is ready within ``wait_s``, else 202 and the job's address."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from .._deps import ServiceDep, TokenDep
from .._problems import PROBLEM_RESPONSES
from .._schemas import JobPublic, ResultPublic, SolveRequest

router = APIRouter(prefix="/v1", tags=["solve"])


@router.post(
    "/solve", operation_id="solve", response_model=None, summary="Solve a graph under a memory budget",
    responses={200: {"model": ResultPublic, "description": "The remat.result/v1, ready within wait_s"},
               202: {"model": JobPublic, "description": "Still running: poll the job at Location"},
               **PROBLEM_RESPONSES},
)
async def solve(body: SolveRequest, service: ServiceDep, token: TokenDep) -> JSONResponse:
    """Identical requests share one job; a proved-optimal (or deterministic) result is served from the store."""
    job = await run_in_threadpool(service.submit_solve, body, token)
    job = await service.wait(job.id, service.wait_s(body.wait_s))
    where = f"/v1/jobs/{job.id}"
    if job.status.terminal and job.result is not None:
        return JSONResponse(job.result.to_json(), headers={"Content-Location": where})
    headers = {"Location": where} if job.status.terminal else {"Location": where, "Retry-After": "1"}
    return JSONResponse(JobPublic.of(job).model_dump(mode="json"), status_code=202, headers=headers)
