"""A client for the remat service's HTTP API (``remat solve/compare/max-batch --server``, ``rematerialize(server=...)``,
scripts).

>>> with Client("http://127.0.0.1:8000") as remat:          # doctest: +SKIP
...     result = remat.solve(graph, budget_ratio=0.8, strategy="checkmate", time_limit_s=60)

Problem documents become :class:`ServiceError` (a :class:`remat.schedules.RematError`), whose
message is the server's ``detail``; ``status`` and ``problem`` keep the rest.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeAlias

import httpx

from remat.schedules import Graph, RematError, Transfer
from remat.solvers import DEFAULT_CONVERGENCE, Convergence, ResultDocument

__all__ = ["Client", "ServiceError"]

TransferLike: TypeAlias = Transfer | Mapping[str, Any]
"""Transfer parameters as a Transfer, or as the request's ``transfer`` object (units or a named profile)."""
TERMINAL = ("succeeded", "failed", "cancelled")
WAIT_S = 7200.0
"""How long ``wait`` (and so ``solve`` and ``result``) polls a job by default: the service's longest solve
(an hour by default) with as long again to wait in the queue. ``timeout_s=None`` waits for good. (docs/tuning.md)"""
SWEEP_WAIT_S = 86400.0
"""How long ``wait_sweep`` and ``wait_max_batch`` poll by default: a day (a sweep is hundreds of solves).
(docs/tuning.md)"""
LONGEST_POLL_S = 5.0
"""Polls start ``poll_s`` apart and back off to this. (docs/tuning.md)"""
RETRY_STATUSES = (429, 503)
"""Refusals for lack of room: retried after their Retry-After, within the client's ``retry_s``."""


class ServiceError(RematError):
    """The service refused a request or a job failed; ``status`` is the HTTP status (0 for a failed job)."""

    def __init__(self, message: str, *, status: int, problem: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = dict(problem or {})


class Client:
    """Talks to one remat service.

    Parameters
    ----------
    url : str
        The service's base URL, e.g. ``http://127.0.0.1:8000``.
    token : str, optional
        Bearer token; default ``$REMAT_TOKEN`` when set.
    timeout_s : float
        Seconds for one HTTP exchange (a long solve is polled, not waited for in one request).
    retry_s : float
        How long a request refused for lack of room (429, 503) is tried again, each time after the
        server's ``Retry-After``; 0: never (the ServiceError comes at once).
    """

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0, retry_s: float = 60.0) -> None:
        token = token if token is not None else os.environ.get("REMAT_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.retry_s = retry_s

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- solves ------------------------------------------------------------------------------------

    def submit(self, graph: Graph | Mapping[str, Any], *, budget: int | None = None,
               budget_ratio: float | None = None, strategy: str = "checkmate", backend: str = "auto",
               time_limit_s: float | None = None, mip_gap: float | None = None,
               options: Mapping[str, Any] | None = None, transfer: TransferLike | None = None,
               host_budget: int | None = None,
               convergence: Convergence | None = DEFAULT_CONVERGENCE) -> dict[str, Any]:
        """Submit a solve and return its job at once (``status`` says whether it has already ended)."""
        response = self._post_solve(graph, budget=budget, budget_ratio=budget_ratio, strategy=strategy,
                                    backend=backend, time_limit_s=time_limit_s, mip_gap=mip_gap, options=options,
                                    transfer=_transfer_doc(transfer), host_budget=host_budget, wait_s=0,
                                    convergence=convergence)
        if response.status_code == 202:
            job: dict[str, Any] = response.json()
            return job
        return self.job(response.headers["Content-Location"].rsplit("/", 1)[-1])

    def solve(self, graph: Graph | Mapping[str, Any], *, budget: int | None = None,
              budget_ratio: float | None = None, strategy: str = "checkmate", backend: str = "auto",
              time_limit_s: float | None = None, mip_gap: float | None = None,
              options: Mapping[str, Any] | None = None, transfer: TransferLike | None = None,
              host_budget: int | None = None, wait_s: float = 10.0,
              convergence: Convergence | None = DEFAULT_CONVERGENCE) -> ResultDocument:
        """Solve and return the remat.result/v1, polling the job for as long as the solve takes.

        ``options`` are the strategy's own (:func:`remat.solvers.solve`'s); ``transfer`` (a Transfer, or the
        request's ``transfer`` object) and ``host_budget`` (bytes) are for strategies that offload; the solve
        stops once ``convergence`` holds (None: at its time limit). Raises ServiceError when the request is
        refused or the job fails without a result.
        """
        response = self._post_solve(graph, budget=budget, budget_ratio=budget_ratio, strategy=strategy,
                                    backend=backend, time_limit_s=time_limit_s, mip_gap=mip_gap, options=options,
                                    transfer=_transfer_doc(transfer), host_budget=host_budget, wait_s=wait_s,
                                    convergence=convergence)
        if response.status_code == 200:
            return ResultDocument.from_json(response.json())
        return self.result(response.json()["id"])

    def _post_solve(self, graph: Graph | Mapping[str, Any], *, convergence: Convergence | None,
                    **options: Any) -> httpx.Response:
        body = _without_none({"graph": _graph_doc(graph), **options})
        return self._request("POST", "/v1/solve", json=_with_convergence(body, convergence))

    def job(self, job_id: str) -> dict[str, Any]:
        """The job as the service shows it: status, progress, error and (once done) result."""
        job: dict[str, Any] = self._request("GET", f"/v1/jobs/{job_id}").json()
        return job

    def wait(self, job_id: str, *, timeout_s: float | None = WAIT_S, poll_s: float = 0.5) -> dict[str, Any]:
        """The job once it has ended, or as it stands after ``timeout_s`` (None: however long it takes).

        Polls start ``poll_s`` apart and back off to LONGEST_POLL_S.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = poll_s
        while True:
            job = self.job(job_id)
            left = None if deadline is None else deadline - time.monotonic()
            if job["status"] in TERMINAL or (left is not None and left <= 0):
                return job
            time.sleep(pause if left is None else min(pause, left))
            pause = min(pause * 1.5, max(poll_s, LONGEST_POLL_S))

    def result(self, job_id: str, *, timeout_s: float | None = WAIT_S) -> ResultDocument:
        """The job's remat.result/v1 once it has ended; ServiceError when it ended without one, or has not
        ended within ``timeout_s``."""
        job = self.wait(job_id, timeout_s=timeout_s)
        if job["status"] not in TERMINAL:
            raise ServiceError(f"Job {job_id} has not ended within {timeout_s:g} s (it is {job['status']}); "
                               f"wait for it with Client.wait or Client.result.", status=0, problem=job)
        if job["result"] is None:
            raise ServiceError(f"Job {job_id} {job['status']}: {job['error'] or 'no result'}", status=0,
                               problem=job)
        return ResultDocument.from_json(job["result"])

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Ask the service to stop the job; it keeps the best plan found so far."""
        job: dict[str, Any] = self._request("POST", f"/v1/jobs/{job_id}/cancel").json()
        return job

    def events(self, job_id: str) -> Iterator[dict[str, Any]]:
        """The job's server-sent events, as ``{"event", "id", "data"}``, until it has ended."""
        with self._unreachable_as_service_error():
            with self._http.stream("GET", f"/v1/jobs/{job_id}/events", timeout=None) as response:
                _raise_for_problem(response, streamed=True)
                event: dict[str, Any] = {}
                for line in response.iter_lines():
                    if not line:
                        if "data" in event:
                            yield event
                        event = {}
                    elif not line.startswith(":"):
                        key, _, value = line.partition(":")
                        event[key] = json.loads(value) if key == "data" else value.strip()

    def jobs(self, *, limit: int = 50, status: str | None = None) -> list[dict[str, Any]]:
        """The newest jobs (at most ``limit``), of one ``status`` if given."""
        params = _without_none({"limit": limit, "status": status})
        jobs: list[dict[str, Any]] = self._request("GET", "/v1/jobs", params=params).json()["jobs"]
        return jobs

    # -- sweeps and the rest -----------------------------------------------------------------------

    def sweep(self, graph: Graph | Mapping[str, Any], *, strategies: Sequence[str] | None = None,
              budgets: Sequence[int] | None = None, backend: str = "auto", time_limit_s: float | None = None,
              mip_gap: float | None = None, transfer: TransferLike | None = None,
              host_budget: int | None = None,
              convergence: Convergence | None = DEFAULT_CONVERGENCE) -> dict[str, Any]:
        """Start a sweep; returns its summary (``id``, ``status``, counts). Poll it with get_sweep.

        With ``transfer``, the default strategies include those that offload."""
        body = _without_none({"graph": _graph_doc(graph), "strategies": strategies, "budgets": budgets,
                              "backend": backend, "time_limit_s": time_limit_s, "mip_gap": mip_gap,
                              "transfer": _transfer_doc(transfer), "host_budget": host_budget})
        body = _with_convergence(body, convergence)
        sweep: dict[str, Any] = self._request("POST", "/v1/sweeps", json=body).json()
        return sweep

    def get_sweep(self, sweep_id: str, *, summary: bool = False) -> dict[str, Any]:
        """The sweep: status, its jobs' statuses and every result so far (without schedules, plans
        and logs when ``summary``)."""
        params = {"results": "summary"} if summary else None
        sweep: dict[str, Any] = self._request("GET", f"/v1/sweeps/{sweep_id}", params=params).json()
        return sweep

    def wait_sweep(self, sweep_id: str, *, poll_s: float = 1.0, summary: bool = False,
                   timeout_s: float | None = SWEEP_WAIT_S,
                   on_poll: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Poll the sweep (results summarized) until every job has ended, or for ``timeout_s`` (None: however
        long it takes); then the sweep, as get_sweep.

        ``on_poll`` sees each polled document (statuses and counts so far), the last one included.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            doc = self.get_sweep(sweep_id, summary=True)
            if on_poll is not None:
                on_poll(doc)
            if doc["status"] in TERMINAL or (deadline is not None and time.monotonic() >= deadline):
                return doc if summary else self.get_sweep(sweep_id)
            time.sleep(poll_s)

    # -- max-batch searches ------------------------------------------------------------------------

    def max_batch(self, graphs: Mapping[int, Graph | Mapping[str, Any]], *, budget: int,
                  max_overhead: float | None = None, strategies: Sequence[str] | None = None, backend: str = "auto",
                  time_limit_s: float | None = None, mip_gap: float | None = None,
                  convergence: Convergence | None = DEFAULT_CONVERGENCE) -> dict[str, Any]:
        """Start a search for the largest batch each strategy fits in ``budget`` bytes, from the model's graphs at
        two or more batch sizes (``{batch: graph}``); returns its summary (``id``, ``status``). Poll it with
        get_max_batch or wait_max_batch."""
        body = _without_none({"graphs": [{"batch": b, "graph": _graph_doc(g)} for b, g in graphs.items()],
                              "budget": budget, "max_overhead": max_overhead, "strategies": strategies,
                              "backend": backend, "time_limit_s": time_limit_s, "mip_gap": mip_gap})
        body = _with_convergence(body, convergence)
        search: dict[str, Any] = self._request("POST", "/v1/max-batch", json=body).json()
        return search

    def get_max_batch(self, search_id: str, *, summary: bool = False) -> dict[str, Any]:
        """The remat.max-batch/v1 document: each strategy's batch so far and its trials, and the chosen plan's
        result (without its schedule, plan and log when ``summary``)."""
        params = {"result": "summary"} if summary else None
        doc: dict[str, Any] = self._request("GET", f"/v1/max-batch/{search_id}", params=params).json()
        return doc

    def wait_max_batch(self, search_id: str, *, poll_s: float = 1.0, timeout_s: float | None = SWEEP_WAIT_S,
                       on_poll: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Poll the search (its result summarized) until it has ended, or for ``timeout_s`` (None: however long it
        takes); then the whole document. ``on_poll`` sees each polled document, the last one included."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            doc = self.get_max_batch(search_id, summary=True)
            if on_poll is not None:
                on_poll(doc)
            if doc["status"] in TERMINAL or (deadline is not None and time.monotonic() >= deadline):
                return self.get_max_batch(search_id)
            time.sleep(poll_s)

    def cancel_max_batch(self, search_id: str) -> dict[str, Any]:
        """End the search now: each strategy keeps the largest batch found so far."""
        search: dict[str, Any] = self._request("POST", f"/v1/max-batch/{search_id}/cancel").json()
        return search

    def strategies(self) -> dict[str, Any]:
        """The service's strategies, with their backends and the backends installed there."""
        listing: dict[str, Any] = self._request("GET", "/v1/strategies").json()
        return listing

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response; a refusal for lack of room is tried again after its Retry-After, within ``retry_s``."""
        deadline = time.monotonic() + self.retry_s
        while True:
            with self._unreachable_as_service_error():
                response = self._http.request(method, path, **kwargs)
            pause = _retry_after(response)
            if pause is None or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
        _raise_for_problem(response)
        return response

    @contextmanager
    def _unreachable_as_service_error(self) -> Iterator[None]:
        """Turn a transport failure (refused, reset, timed out) into a ServiceError naming the service."""
        try:
            yield
        except httpx.TransportError as e:
            raise ServiceError(f"Cannot reach the remat service at {self._http.base_url}: {e}.", status=0) from e


def _raise_for_problem(response: httpx.Response, *, streamed: bool = False) -> None:
    if response.status_code < 400:
        return
    if streamed:
        response.read()
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if isinstance(problem, dict):
        detail = problem.get("detail") or problem.get("title") or response.reason_phrase
    else:
        problem, detail = {}, response.text[:500] or response.reason_phrase
    raise ServiceError(f"{response.status_code} {detail}", status=response.status_code, problem=problem)


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asks to wait before trying a refused request again (429, 503), else None."""
    value = response.headers.get("Retry-After", "")
    if response.status_code not in RETRY_STATUSES or not value.isdigit():
        return None
    return float(value)


def _graph_doc(graph: Graph | Mapping[str, Any]) -> dict[str, Any]:
    return graph.to_json() if isinstance(graph, Graph) else dict(graph)


def _transfer_doc(transfer: TransferLike | None) -> dict[str, Any] | None:
    return transfer.to_json() if isinstance(transfer, Transfer) else None if transfer is None else dict(transfer)


def _without_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _with_convergence(body: dict[str, Any], convergence: Convergence | None) -> dict[str, Any]:
    """The body with its convergence rule; an explicit null, since the service's default is to converge."""
    return {**body, "convergence": None if convergence is None else convergence.to_json()}
