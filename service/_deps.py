"""Dependencies of the routes, as Annotated aliases: a handler's signature lists what it needs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Path, Request

from ._jobs import Job
from ._service import Service

__all__ = ["IdPath", "JobDep", "ServiceDep", "TokenDep", "require_token"]


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def require_token(request: Request, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
                  ) -> str | None:
    """The request's token id (None when authentication is off); 401 without a valid token."""
    token: str | None = request.app.state.token_check(authorization)
    return token


IdPath = Annotated[str, Path(max_length=200)]
"""A job's or sweep's id in a path: ids are 64 hex digits; anything past 200 characters is refused at once."""


def _job(job_id: IdPath, service: Annotated[Service, Depends(_service)]) -> Job:
    return service.store.get(job_id)


ServiceDep = Annotated[Service, Depends(_service)]
TokenDep = Annotated[str | None, Depends(require_token)]
JobDep = Annotated[Job, Depends(_job)]
"""The job named by the path's ``job_id``, with its result; JobNotFound (404) when there is none."""
