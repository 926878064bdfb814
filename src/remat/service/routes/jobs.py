"""Jobs: list, look up, cancel, and follow as server-sent events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from .._deps import IdPath, JobDep, ServiceDep, TokenDep
from .._jobs import JobStatus
from .._problems import PROBLEM_RESPONSES
from .._schemas import JobList, JobPublic

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

EVENT_POLL_S = 0.5
"""Seconds between two looks at a job whose events someone follows. (docs/tuning.md)"""


@router.get("", operation_id="list_jobs", response_model=JobList, responses=PROBLEM_RESPONSES)
def list_jobs(service: ServiceDep, token: TokenDep, limit: Annotated[int, Query(ge=1, le=1000)] = 50,
              status: JobStatus | None = None) -> JobList:
    """The caller's most recent jobs, newest first (without their results)."""
    jobs = [JobPublic.of(j, with_result=False) for j in service.store.list_jobs(token, limit=limit, status=status)]
    return JobList(jobs=jobs, count=len(jobs))


ScheduleForm = Annotated[Literal["compact", "full"], Query(
    description="'full' writes the result's schedule with every stage's whole retained set (stages x nodes ids "
                "at worst) instead of what changes from stage to stage")]


@router.get("/{job_id}", operation_id="get_job", response_model=JobPublic, responses=PROBLEM_RESPONSES)
async def get_job(job_id: IdPath, service: ServiceDep, token: TokenDep,
                  schedule: ScheduleForm = "compact") -> JSONResponse:
    """Status, progress (elapsed, incumbent cost, lower bound, gap) and, once done, the result."""
    job = await run_in_threadpool(service.job, job_id, token)
    if schedule == "full" and job.result is not None:
        full = await run_in_threadpool(service.full_schedule, job)
        job = replace(job, result=replace(job.result, schedule=full))
    return JSONResponse(JobPublic.of(job).model_dump(mode="json"))


@router.post("/{job_id}/cancel", operation_id="cancel_job", response_model=JobPublic,
             responses={202: {"model": JobPublic, "description": "The solve is being stopped"}, **PROBLEM_RESPONSES})
def cancel_job(job: JobDep, service: ServiceDep, token: TokenDep) -> JSONResponse:
    """Stop the solve within seconds, keeping the best plan found so far; a no-op once the job has ended."""
    current = service.cancel(job.id, token)
    return JSONResponse(JobPublic.of(current, with_result=False).model_dump(mode="json"),
                        status_code=200 if current.status.terminal else 202)


@router.get("/{job_id}/events", operation_id="job_events", response_class=EventSourceResponse,
            responses=PROBLEM_RESPONSES)
async def job_events(job: JobDep, service: ServiceDep) -> AsyncIterator[ServerSentEvent]:
    """Server-sent events: ``progress`` whenever the job changes, then one ``end`` when it has ended."""
    seen = None
    count = 0
    current = job
    while True:
        state = (current.status, current.attempts, current.cancel_requested, current.progress)
        if state != seen:
            seen, count = state, count + 1
            yield ServerSentEvent(event="end" if current.status.terminal else "progress", id=str(count),
                                  data=JobPublic.of(current, with_result=False).model_dump(mode="json"))
        if current.status.terminal:
            return
        await asyncio.sleep(EVENT_POLL_S)
        current = await run_in_threadpool(service.store.get, job.id, with_result=False)
