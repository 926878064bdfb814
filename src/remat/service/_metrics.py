"""Prometheus metrics of one API process: requests, submissions, refusals, and jobs by status.

Each app has its own registry (several apps can live in one test process). Job counts are read
from the store when Prometheus scrapes, so every replica reports the cluster's jobs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from ._jobs import JobStatus
from ._store import JobStore

__all__ = ["Metrics", "count_requests"]

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""HTTP methods counted under their own name; any other token a client sends counts as ``other``, so a
client cannot add label values (series kept for the life of the process) by inventing methods."""


class _JobCounts(Collector):
    def __init__(self, store: JobStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("remat_jobs", "Jobs in the store, by status.", labels=["status"])
        for status in JobStatus:
            family.add_metric([status.value], self.store.count(status))
        yield family


class Metrics:
    """The counters the API updates, and the exposition of them all."""

    def __init__(self, store: JobStore) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("remat_http_requests", "HTTP requests, by route template and status code.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("remat_http_request_duration_seconds", "Time to answer an HTTP request.",
                                 ["route"], registry=self.registry)
        self.jobs_submitted = Counter("remat_jobs_submitted",
                                      "Solve jobs submitted (a sweep's points included), by strategy.",
                                      ["strategy"], registry=self.registry)
        self.cache_hits = Counter("remat_cache_hits",
                                  "Submissions (a sweep's points included) answered by an existing job.",
                                  registry=self.registry)
        self.refusals = Counter("remat_refusals", "Submissions refused for lack of room, by reason.",
                                ["reason"], registry=self.registry)
        self.registry.register(_JobCounts(store))

    def submitted(self, strategy: str, *, cached: bool) -> None:
        self.jobs_submitted.labels(strategy).inc()
        if cached:
            self.cache_hits.inc()

    def refused(self, reason: str) -> None:
        self.refusals.labels(reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def observe(self, request: Request, status: int, seconds: float) -> None:
        route = _route_template(request)
        method = request.method if request.method in METHODS else "other"
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(route).observe(seconds)


async def count_requests(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Middleware: count and time every request under its route template (``/v1/jobs/{job_id}``)."""
    started = time.perf_counter()
    response = await call_next(request)
    service = getattr(request.app.state, "service", None)
    if service is not None:
        service.metrics.observe(request, response.status_code, time.perf_counter() - started)
    return response


def _route_template(request: Request) -> str:
    """The matched route's path template (routing records the route in the scope), or "unmatched"."""
    route = request.scope.get("route")
    return str(getattr(route, "path", "unmatched"))
