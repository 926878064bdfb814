"""What the routes do with jobs, sweeps and max-batch searches: turn requests into specs, admit them, submit,
dispatch, cancel, wait.

This is the boundary: a request's graph becomes a :class:`remat.schedules.Graph` here, once, and
every check that can refuse a request (graph, strategy, backend, budget, limits, queue room) runs
before a job exists, so a bad request is a 4xx and never a failed job. Every lookup names the
caller's token: another token's job, sweep or search is answered as one that does not exist (404).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool

from remat.schedules import (
    BackendUnavailable,
    BatchedGraph,
    Graph,
    InvalidRequest,
    ScheduleEntries,
    Transfer,
    resolve_budget,
)
from remat.solvers import (
    ResultDocument,
    Strategy,
    StrategyKind,
    available_backends,
    get_strategy,
    sweep_budgets,
    sweep_strategies,
)

from . import _jobs
from ._errors import JobNotFound, QueueFull, StoreQuota, TooManyJobs
from ._executor import Executor
from ._jobs import Job, JobStatus, SolveSpec, needs_run
from ._max_batch_schemas import MaxBatchPublic, MaxBatchRequest
from ._max_batches import MaxBatchSearch, new_max_batch, restartable
from ._metrics import Metrics
from ._schemas import SolveRequest, SweepRequest
from ._settings import Settings
from ._sweeps import Sweep, new_sweep
from ._token_load import token_load

__all__ = ["Service"]

WAIT_POLL_S = (0.01, 0.1)
"""First and longest pause between two looks at a job someone waits for. (docs/tuning.md)"""
FULL_SCHEDULE_MAX_IDS = 2_000_000
"""Most node ids of a schedule's full form the API writes (about 20 MB of JSON); the compact form has no limit."""


class Service:
    """Jobs and sweeps as the API sees them, over one executor and its store."""

    def __init__(self, settings: Settings, executor: Executor, metrics: Metrics) -> None:
        self.settings = settings
        self.executor = executor
        self.store = executor.store
        self.metrics = metrics

    # -- solves ------------------------------------------------------------------------------------

    def submit_solve(self, request: SolveRequest, token: str | None) -> Job:
        """The job answering ``request``: new, shared with an identical one, or already finished."""
        graph = request.graph.to_graph(self.settings.graph_limits)
        strategy = get_strategy(request.strategy)
        _check_backend(strategy, request.backend)
        strategy.check_options(request.options)
        strategy.check_graph(graph, request.options)
        transfer = request.to_transfer()
        strategy.check_transfer(transfer, request.options)
        spec = SolveSpec(graph.sha256, resolve_budget(graph, budget=request.budget, budget_ratio=request.budget_ratio),
                         request.strategy, request.backend, self._time_limit(request.time_limit_s), request.mip_gap,
                         request.options, _transfer_json(transfer), request.host_budget, request.convergence_json())
        return self._submit([spec], graph, token)[0]

    def wait_s(self, requested: float | None) -> float:
        return min(self.settings.default_wait_s if requested is None else requested, self.settings.max_wait_s)

    async def wait(self, job_id: str, wait_s: float) -> Job:
        """The job once it has ended, or as it stands after ``wait_s`` seconds."""
        deadline = time.monotonic() + wait_s
        pause = WAIT_POLL_S[0]
        while True:
            job = await run_in_threadpool(self.store.get, job_id)  # no result is stored before the end
            left = deadline - time.monotonic()
            if job.status.terminal or left <= 0:
                return job
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, WAIT_POLL_S[1])

    def job(self, job_id: str, token: str | None, *, with_result: bool = True) -> Job:
        """``token``'s job ``job_id``; JobNotFound when there is none, or it is another token's."""
        job = self.store.get(job_id, with_result=with_result)
        if job.token != token:
            raise JobNotFound(job_id)
        return job

    def full_schedule(self, job: Job) -> dict[str, Any] | None:
        """The job's schedule in the full form (every stage's whole retained set), from its compact form."""
        schedule = job.result.schedule if job.result is not None else None
        if schedule is None:
            return None
        graph = Graph.from_json(self.store.get_graph(job.spec.graph_sha256), limits=self.settings.graph_limits)
        entries = ScheduleEntries.from_json(graph, schedule)
        if entries.full_size > FULL_SCHEDULE_MAX_IDS:
            raise InvalidRequest(f"This schedule's full form has {entries.full_size} node ids; the service writes at "
                                 f"most {FULL_SCHEDULE_MAX_IDS}. Read the compact form (the default), whose stages "
                                 f"list what changes.", field="schedule")
        return entries.to_json(graph, full=True)

    def cancel(self, job_id: str, token: str | None) -> Job:
        """Cancel ``token``'s job (a no-op once it has ended); returns it as it stands, without its result."""
        self.job(job_id, token, with_result=False)
        return self.store.request_cancel(job_id)

    # -- sweeps ------------------------------------------------------------------------------------

    def submit_sweep(self, request: SweepRequest, token: str | None) -> Sweep:
        """A sweep of ``request``'s graph: every (strategy, budget) point an ordinary job.

        Without ``budgets``, each heuristic's natural point is added once its run at the top budget has
        ended (:mod:`._sweep_completion`): nothing here runs a strategy, so the API's threads stay free.
        """
        graph = request.graph.to_graph(self.settings.graph_limits)
        time_limit_s = self._time_limit(request.time_limit_s)
        transfer = request.to_transfer()
        strategies = sweep_strategies(graph, request.strategies, transfer=transfer)
        budgets = list(dict.fromkeys(request.budgets)) if request.budgets is not None else sweep_budgets(graph)
        natural = 0 if request.budgets is not None else sum(get_strategy(s).kind is StrategyKind.BASELINE
                                                              for s in strategies)
        most = len(strategies) * (len(budgets) + natural)
        if most > self.settings.max_sweep_points:
            raise InvalidRequest(f"The sweep has up to {most} points ({len(strategies)} strategies x "
                                 f"({len(budgets)} budgets + {natural} natural points)); the limit is "
                                 f"{self.settings.max_sweep_points}. Name fewer strategies or budgets.",
                                 field="budgets")
        backends = {s: _sweep_backend(get_strategy(s), request.backend) for s in strategies}
        specs = [SolveSpec(graph.sha256, budget, s, backends[s], time_limit_s, request.mip_gap,
                           transfer=_transfer_json(transfer), host_budget=request.host_budget,
                           convergence=request.convergence_json())
                 for s in strategies for budget in budgets]
        jobs = self._submit(specs, graph, token, reserve=most - len(specs))
        sweep = new_sweep(jobs, graph_name=graph.name, token=token, now=time.time(), planned=natural == 0)
        self.store.put_sweep(sweep)
        return sweep

    def sweep(self, sweep_id: str, token: str | None) -> Sweep:
        """``token``'s sweep ``sweep_id``; JobNotFound when there is none, or it is another token's."""
        sweep = self.store.get_sweep(sweep_id)
        if sweep.token != token:
            raise JobNotFound(sweep_id)
        return sweep

    def job_result(self, job_id: str) -> ResultDocument | None:
        """The remat.result/v1 of job ``job_id`` (None when it has none, or is gone)."""
        try:
            return self.store.get(job_id).result
        except JobNotFound:
            return None

    def sweep_jobs(self, sweep: Sweep, *, with_result: bool) -> list[Job]:
        """The sweep's jobs, in the sweep's order."""
        return self.store.get_many(sweep.job_ids, with_result=with_result)

    # -- max-batch searches ------------------------------------------------------------------------

    def submit_max_batch(self, request: MaxBatchRequest, token: str | None) -> MaxBatchSearch:
        """The search answering ``request``: new, or the token's identical one (begun afresh when it ended without
        an answer for some strategy). Its batches are submitted as jobs by the executors' maintenance
        (:mod:`._max_batch_steps`), never by the API's threads."""
        graphs = {g.batch: g.graph.to_graph(self.settings.graph_limits) for g in request.graphs}
        batched = BatchedGraph.from_graphs(graphs)
        strategies = [(s, _sweep_backend(get_strategy(s), request.backend))
                      for s in sweep_strategies(batched.template, request.strategies)]
        fresh = new_max_batch({b: g.sha256 for b, g in graphs.items()}, graph_name=batched.template.name,
                              budget=request.budget, max_overhead=request.max_overhead, strategies=strategies,
                              time_limit_s=self._time_limit(request.time_limit_s), mip_gap=request.mip_gap,
                              token=token, now=self.store.clock(), convergence=request.convergence_json())
        try:
            current: MaxBatchSearch | None = self.store.get_max_batch(fresh.id)
        except JobNotFound:
            current = None
        if current is not None and not restartable(current):
            return current
        self._admit(len(strategies), token, search=True)  # each strategy holds a slot for its one batch at a time
        docs = self._within_quota(list(graphs.values()), token)
        for graph in graphs.values():
            self.store.put_graph(graph.sha256, docs.get(graph.sha256) or graph.to_json(), token=token)
        if self.store.insert_max_batch(fresh):
            return fresh
        again = self.store.update_max_batch(
            fresh.id, lambda cur: replace(fresh, revision=cur.revision + 1) if restartable(cur) else None)
        return again if again is not None else self.store.get_max_batch(fresh.id)

    def max_batch(self, search_id: str, token: str | None) -> MaxBatchSearch:
        """``token``'s max-batch search ``search_id``; JobNotFound when there is none, or it is another token's."""
        search = self.store.get_max_batch(search_id)
        if search.token != token:
            raise JobNotFound(search_id)
        return search

    def max_batch_jobs(self, search: MaxBatchSearch) -> dict[str, Job]:
        """The jobs of the search's batches being solved (without results), by id."""
        return {j.id: j for j in self.store.get_many(search.pending_job_ids)}

    def max_batch_document(self, search: MaxBatchSearch, *, full_result: bool = True) -> dict[str, Any]:
        """The remat.max-batch/v1 document of ``search``; the chosen plan's result whole, or without its schedule,
        plan and log."""
        doc = MaxBatchPublic.of(search, self.max_batch_jobs(search),
                                self.store.result_summaries(search.best_job_ids)).model_dump(mode="json")
        chosen = doc["chosen"]
        if full_result and chosen is not None:
            result = self.job_result(chosen["job_id"])
            chosen["result"] = None if result is None else result.to_json()
        return doc

    def cancel_max_batch(self, search_id: str, token: str | None) -> MaxBatchSearch:
        """Cancel ``token``'s search: every strategy still searching ends cancelled, and the jobs of the batches
        being solved are cancelled; a no-op once it has ended."""
        self.max_batch(search_id, token)
        cancelled = self.store.update_max_batch(search_id, lambda cur: cur.cancelled(now=self.store.clock()))
        if cancelled is None:
            return self.store.get_max_batch(search_id)
        for job_id in cancelled.pending_job_ids:
            self.store.request_cancel(job_id)
        return cancelled

    # -- shared ------------------------------------------------------------------------------------

    def _time_limit(self, requested: float | None) -> float:
        limit = self.settings.default_time_limit_s if requested is None else requested
        if limit > self.settings.max_time_limit_s:
            raise InvalidRequest(f"'time_limit_s' is {limit:g} s; this server allows at most "
                                 f"{self.settings.max_time_limit_s:g} s.", field="time_limit_s")
        return limit

    def _submit(self, specs: Sequence[SolveSpec], graph: Graph, token: str | None, *, reserve: int = 0) -> list[Job]:
        """Submit what needs running (room for ``reserve`` more jobs to come is checked with it); a job of the
        token that is active or holds a reusable result is answered as it is."""
        ids = [_jobs.job_id(spec, token) for spec in specs]
        existing = {job.id: job for job in self.store.get_many(ids)}
        new = sum(needs_run(existing.get(i)) for i in ids)
        if new or reserve:
            self._admit(new + reserve, token)
        if new:
            doc = self._within_quota([graph], token).get(graph.sha256) or graph.to_json()
            self.store.put_graph(graph.sha256, doc, token=token)
        jobs = []
        for spec, job_id in zip(specs, ids, strict=True):
            job, fresh = existing.get(job_id), False
            if needs_run(job):
                job, fresh = self.store.submit(spec, graph_name=graph.name, token=token)
                if fresh:
                    self.executor.dispatch(job)
            assert job is not None
            self.metrics.submitted(spec.strategy, cached=not fresh)
            jobs.append(job)
        return jobs

    def _within_quota(self, graphs: Sequence[Graph], token: str | None) -> dict[str, dict[str, Any]]:
        """Refuse (413) when ``token``'s stored results have reached its quota, or when storing those of ``graphs``
        the store does not hold would pass its graph quota; returns the new graphs' documents, by hash."""
        s, used = self.settings, self.store.usage(token)
        retention = f"{s.retention_s / 86400:g} days" if s.retention_s >= 86400 else f"{s.retention_s:g} s"
        later = (f"Ended jobs, sweeps and searches are deleted {retention} after they end (REMAT_RETENTION_S); "
                 "submit again then, or ask the operator to raise the limit.")
        if used.result_bytes >= s.max_result_bytes_per_token:
            raise StoreQuota(f"This token's results take {used.result_bytes} bytes of the job store; the limit is "
                             f"{s.max_result_bytes_per_token} (REMAT_MAX_RESULT_BYTES_PER_TOKEN on the server). "
                             f"{later}")
        docs = {g.sha256: g.to_json() for g in graphs if not self.store.has_graph(g.sha256)}
        adding = sum(len(json.dumps(doc)) for doc in docs.values())
        if adding and used.graph_bytes + adding > s.max_graph_bytes_per_token:
            raise StoreQuota(f"This token's graphs take {used.graph_bytes} bytes of the job store and this request "
                             f"adds {adding}; the limit is {s.max_graph_bytes_per_token} "
                             f"(REMAT_MAX_GRAPH_BYTES_PER_TOKEN on the server). {later}")
        return docs

    def _admit(self, new: int, token: str | None, *, search: bool = False) -> None:
        """Refuse when ``new`` more jobs (or slots, for a ``search``) would overfill the queue (503), the token's
        share of jobs (its queued or running jobs and the slots its searches hold), or its share of searches (429;
        without authentication every caller shares one)."""
        s, retry = self.settings, self.settings.retry_after_s
        queued = self.store.count(JobStatus.QUEUED)
        if queued + new > s.max_queued_jobs:
            self.metrics.refused("queue_full")
            raise QueueFull(f"The queue is full ({queued} jobs wait; this request adds {new}, the limit is "
                            f"{s.max_queued_jobs}). Retry in {retry} s.", retry_after_s=retry)
        load = token_load(self.store, token)
        if search and load.searches >= s.max_searches_per_token:
            self.metrics.refused("token_limit")
            raise TooManyJobs(f"This token has {load.searches} max-batch searches going on; the limit is "
                              f"{s.max_searches_per_token} (REMAT_MAX_SEARCHES_PER_TOKEN on the server). Retry once "
                              f"one has ended, or cancel one.", retry_after_s=retry)
        if load.slots + new > s.max_active_jobs_per_token:
            self.metrics.refused("token_limit")
            raise TooManyJobs(f"This token has {load.active_jobs} queued or running jobs and its max-batch searches "
                              f"hold {load.held_slots} more for their next batches; this request adds {new}, the "
                              f"limit is {s.max_active_jobs_per_token} (REMAT_MAX_ACTIVE_JOBS_PER_TOKEN on the "
                              f"server). Retry in {retry} s.", retry_after_s=retry)


def _check_backend(strategy: Strategy, backend: str) -> None:
    """Refuse a backend the strategy does not use, or one whose engine this service lacks (not a failed job)."""
    strategy.check_backend(backend)
    if backend == "auto":
        return
    installed = available_backends()
    if backend not in installed:
        raise BackendUnavailable(f"Backend {backend!r} is not installed on this service; installed: "
                                 f"{', '.join(installed) or 'none'} (or auto).")


def _transfer_json(transfer: Transfer | None) -> dict[str, float] | None:
    """The transfer a job records, in the graph's units: a profile and the same numbers make one job."""
    return None if transfer is None else transfer.to_json()


def _sweep_backend(strategy: Strategy, backend: str) -> str:
    """A sweep's backend applies to the strategies that use one; heuristics run with ``auto``."""
    if not strategy.backends:
        return "auto"
    _check_backend(strategy, backend)
    return backend
