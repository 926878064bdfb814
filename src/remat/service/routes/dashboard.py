"""The dashboard: HTML pages over the job store, under ``/dashboard`` and outside the OpenAPI schema.

``/`` links to it and to the API documentation. ``/dashboard`` lists recent sweeps, max-batch searches
and jobs; ``/dashboard/sweeps/{id}``, ``/dashboard/max-batch/{id}`` and ``/dashboard/jobs/{id}`` show one,
live while it runs (their ``/data`` twins answer the page's polls); ``/dashboard/static/`` serves the vendored assets.

When the service requires a bearer token, so do the pages. A browser cannot send an Authorization
header on a link, so a page also accepts the token from the ``remat_token`` cookie, an HTTP-only,
SameSite=Strict cookie scoped to ``/dashboard``. Only the sign-in form a browser gets instead of a 401
(``POST /dashboard/login``, :mod:`._sign_in`) sets it; a link with ``?token=`` signs nobody in. The
cookie is accepted only here, by pages that change nothing, and never by the ``/v1`` API.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Cookie, Depends, Header, Path, Request
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse, JSONResponse, Response

from remat.report import (
    ASSETS,
    job_update,
    max_batch_update,
    render_index,
    render_job,
    render_max_batch,
    render_root,
    render_sweep,
    sweep_update,
)

from .._deps import IdPath, ServiceDep
from .._errors import Unauthorized
from .._jobs import JobStatus, remat_version
from .._schemas import JobPublic
from ..dashboard import load_job, load_recent, load_sweep
from ._sign_in import sign_in, sign_in_form

RECENT_SWEEPS = 20
RECENT_JOBS = 50


def viewer(request: Request, authorization: Annotated[str | None, Header()] = None,
           remat_token: Annotated[str | None, Cookie()] = None) -> str | None:
    """The token id of whoever looks (None when authentication is off); Unauthorized without a valid token."""
    if authorization is None and remat_token is not None:
        authorization = f"Bearer {remat_token}"
    token: str | None = request.app.state.token_check(authorization)
    return token


class PageRoute(APIRoute):
    """A dashboard route: a browser without a valid token gets the sign-in form (data requests still get the 401
    problem document)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handle(request)
            except Unauthorized as e:
                if "text/html" not in request.headers.get("accept", ""):
                    raise
                return sign_in_form(request, next_url=request.url.path, message=str(e))

        return route


ViewerDep = Annotated[str | None, Depends(viewer)]
pages = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=PageRoute,
                  dependencies=[Depends(viewer)])  # every page, even one that does not ask for the viewer
public = APIRouter(prefix="/dashboard", include_in_schema=False, route_class=PageRoute)


@pages.get("")
def index(service: ServiceDep, token: ViewerDep) -> HTMLResponse:
    """The viewer's recent sweeps with their progress, recent jobs with their results' numbers."""
    return HTMLResponse(render_index(**load_recent(service, token, sweeps=RECENT_SWEEPS, jobs=RECENT_JOBS)))


@pages.get("/sweeps/{sweep_id}")
def sweep_page(sweep_id: IdPath, service: ServiceDep, token: ViewerDep) -> HTMLResponse:
    """Overhead against budget for every strategy, the table behind it, and live progress."""
    view = load_sweep(service, service.sweep(sweep_id, token))
    poll = None if view.done else f"/dashboard/sweeps/{sweep_id}/data"
    return HTMLResponse(render_sweep(view, sweep_id=sweep_id, poll=poll))


@pages.get("/sweeps/{sweep_id}/data")
def sweep_data(sweep_id: IdPath, service: ServiceDep, token: ViewerDep) -> JSONResponse:
    """What the sweep page swaps in while the sweep runs."""
    view = load_sweep(service, service.sweep(sweep_id, token))
    return JSONResponse(sweep_update(view, poll=None if view.done else f"/dashboard/sweeps/{sweep_id}/data"))


@pages.get("/max-batch/{search_id}")
def max_batch_page(search_id: IdPath, service: ServiceDep, token: ViewerDep) -> HTMLResponse:
    """The largest batch of each strategy as bars, with its ratios to checkpoint-all's and the best baseline's."""
    doc = service.max_batch_document(service.max_batch(search_id, token), full_result=False)
    return HTMLResponse(render_max_batch(doc, poll=_max_batch_poll(search_id, doc)))


@pages.get("/max-batch/{search_id}/data")
def max_batch_data(search_id: IdPath, service: ServiceDep, token: ViewerDep) -> JSONResponse:
    """What the max-batch page swaps in while the search goes on."""
    doc = service.max_batch_document(service.max_batch(search_id, token), full_result=False)
    return JSONResponse(max_batch_update(doc, poll=_max_batch_poll(search_id, doc)))


def _max_batch_poll(search_id: str, doc: dict[str, Any]) -> str | None:
    return None if JobStatus(doc["status"]).terminal else f"/dashboard/max-batch/{search_id}/data"


@pages.get("/jobs/{job_id}")
def job_page(job_id: IdPath, service: ServiceDep, token: ViewerDep) -> HTMLResponse:
    """The job's result, memory over its plan against the budget, R/S heat maps, plan statistics."""
    view = load_job(service, service.job(job_id, token, with_result=False))
    poll = None if view.ended else f"/dashboard/jobs/{job_id}/data"
    return HTMLResponse(render_job(view.job, view.result, figures=view.figures, stats=view.stats, poll=poll,
                                   notice=view.notice))


@pages.get("/jobs/{job_id}/data")
def job_data(job_id: IdPath, service: ServiceDep, token: ViewerDep) -> JSONResponse:
    """The job's progress while it runs; ``reload`` once it has ended."""
    job = service.job(job_id, token, with_result=False)
    poll = None if job.status.terminal else f"/dashboard/jobs/{job_id}/data"
    return JSONResponse(job_update(JobPublic.of(job).model_dump(mode="json"), poll=poll))


@public.post("/login")
async def login(request: Request) -> Response:
    """The sign-in form's target: checks the form and the token, sets the cookie, goes on to the page asked for.

    The form is read whole: :class:`~.._bodies.BodyLimit` lets a path that needs no token send at most
    PUBLIC_BODY_BYTES, within the body timeout, and reserves nothing for it."""
    return sign_in(request, parse_qs((await request.body()).decode("utf-8", "replace")))


@public.get("/static/{name}")
def static(name: Annotated[str, Path(max_length=100)]) -> Response:
    """A vendored asset; its URL carries a digest of its bytes, so browsers may keep it for a year."""
    asset = ASSETS.get(name)
    if asset is None:
        raise HTTPException(404, f"The dashboard has no file {name!r}.")
    return Response(asset.content, media_type=asset.media_type,
                    headers={"Cache-Control": "public, max-age=31536000, immutable"})


front = APIRouter(include_in_schema=False)
LINKS = {"dashboard": "/dashboard", "docs": "/docs", "openapi": "/openapi.json", "health": "/healthz",
         "ready": "/readyz", "metrics": "/metrics"}


@front.get("/")
def root(request: Request) -> Response:
    """The service's front door: a page linking the dashboard and the API documentation, or the links as JSON."""
    if "text/html" in request.headers.get("accept", ""):
        return HTMLResponse(render_root(version=remat_version()))
    return JSONResponse({"name": "remat", "version": remat_version(), "links": LINKS})


router = APIRouter()
"""Every dashboard route: the pages (behind the token when authentication is on), sign-in, assets, and ``/``."""
router.include_router(pages)
router.include_router(public)
router.include_router(front)
