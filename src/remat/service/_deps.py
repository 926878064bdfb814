"""Dependencies of the routes, as Annotated aliases: a handler's signature lists what it needs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from ._auth import TOKEN_STATE
from ._errors import Unauthorized
from ._jobs import Job
from ._service import Service

__all__ = ["IdPath", "JobDep", "ServiceDep", "TokenDep", "require_token"]


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def require_token(request: Request) -> str | None:
    """The caller's token id (None when authentication is off), as :class:`Authenticate` found it before the
    body was read; a route it did not check fails closed (401)."""
    state = request.scope.get("state", {})
    if TOKEN_STATE not in state:
        raise Unauthorized("This route is not behind the token check; refusing the request.")
    token: str | None = state[TOKEN_STATE]
    return token


IdPath = Annotated[str, Path(max_length=200)]
"""A job's or sweep's id in a path: ids are 64 hex digits; anything past 200 characters is refused at once."""


ServiceDep = Annotated[Service, Depends(_service)]
TokenDep = Annotated[str | None, Depends(require_token)]


def _job(job_id: IdPath, service: ServiceDep, token: TokenDep) -> Job:
    return service.job(job_id, token, with_result=False)


JobDep = Annotated[Job, Depends(_job)]
"""The caller's job named by the path's ``job_id``, without its result; JobNotFound (404) when there is none
or it is another token's."""
