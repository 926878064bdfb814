"""``create_app(settings)``: the FastAPI application, wired from its parts and nothing more."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from . import routes
from ._auth import Authenticate, TokenCheck
from ._bodies import BodyLimit
from ._deps import require_token
from ._executor import open_executor
from ._headers import SecurityHeaders
from ._jobs import remat_version
from ._metrics import Metrics, count_requests
from ._problems import install_problem_handlers
from ._service import Service
from ._settings import Settings

__all__ = ["create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    """The remat service. The job store and executor open when the app starts and close when it stops."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        executor = await run_in_threadpool(open_executor, settings)
        await run_in_threadpool(executor.start)
        app.state.service = Service(settings, executor, Metrics(executor.store))
        try:
            yield
        finally:
            await run_in_threadpool(executor.close)

    app = FastAPI(title="remat", version=remat_version(), lifespan=lifespan,
                  summary="Memory-bounded training schedules: which activations to keep, free and recompute.",
                  separate_input_output_schemas=False)
    app.state.token_check = TokenCheck(settings.tokens)
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,  # innermost: the endpoint reads through it
                       max_in_flight_bytes=settings.max_body_bytes_in_flight,
                       max_per_token_bytes=settings.body_share_bytes, timeout_s=settings.body_timeout_s,
                       retry_after_s=settings.retry_after_s)
    app.add_middleware(Authenticate, check=app.state.token_check)  # outside it: only a checked token reserves room
    app.add_middleware(SecurityHeaders)  # outside both: their refusals carry the headers too
    app.middleware("http")(count_requests)
    app.include_router(routes.health)
    app.include_router(routes.dashboard)
    for router in (routes.solve, routes.jobs, routes.sweeps, routes.max_batch, routes.strategies):
        app.include_router(router, dependencies=[Depends(require_token)])
    return app
