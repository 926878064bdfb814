"""The steps of max-batch searches (see :mod:`._max_batches`): each strategy's next batch, as a job.

The executors' maintenance (every API replica, every worker) calls :func:`advance_max_batches` on
each pass, and a runner calls it again as soon as one of its jobs has ended, so a search moves on
without waiting for the next pass. A step of one search: find the bisection's bounds (once), record
the verdict of every trial whose job has ended, and submit each strategy's next batch until one is
pending or its answer is known. A batch answered at once by a reusable result (a baseline's
plan at a batch solved before) is judged in the same step.

Every batch counts against the token's ``max_active_jobs_per_token``: its search held the slot since
admission (:mod:`._token_load`), and a batch is submitted only while the token's queued and running jobs
are under the cap; otherwise the strategy waits for the next pass.

Submitting a job is idempotent and the new record is written only over the revision it was made
from, so two processes stepping one search at once agree; the loser's next pass starts from the
winner's record. A job submitted for a search cancelled meanwhile is cancelled again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property

from remat.schedules import BatchedGraph, Graph, GraphLimits, RematError
from remat.solvers import BatchSearch, cost_cap

from ._jobs import Job, JobStatus, SolveSpec
from ._max_batches import MaxBatchSearch, StrategySearch, Trial
from ._store import JobStore
from ._token_load import room_for_jobs

__all__ = ["advance_max_batches"]

log = logging.getLogger("remat.service")


def advance_max_batches(store: JobStore, dispatch: Callable[[Job], None], limits: GraphLimits, *,
                        max_active_jobs_per_token: int) -> list[MaxBatchSearch]:
    """Step every search that can go on, submitting batches only within their tokens' caps; returns the records
    written."""
    written = []
    for search in store.active_max_batches():
        step = _Step(store, search, dispatch, limits, max_active_jobs_per_token)
        try:
            new = step.run()
        except RematError as e:  # its graphs are gone (JobNotFound) or no longer read under this server's limits
            log.warning("max-batch %s: cannot go on: %s", search.id, e)
            ended = tuple(s if s.ended else s.end(JobStatus.FAILED, f"the search cannot go on: {e}")
                          for s in search.strategies)
            new = search.revised(strategies=ended, finished_at=store.clock())
        if new is not None and step.write(new) is not None:
            written.append(new)
    return written


class _Step:
    """One step of one search, over the record as it was read."""

    def __init__(self, store: JobStore, search: MaxBatchSearch, dispatch: Callable[[Job], None],
                 limits: GraphLimits, cap: int) -> None:
        self.store, self.search, self.dispatch, self.limits, self.cap = store, search, dispatch, limits, cap
        self.jobs = {j.id: j for j in store.get_many(search.pending_job_ids)}
        self.graphs: dict[int, Graph] = {}
        self.submitted: list[str] = []
        self._room: int | None = None

    def room(self) -> int:
        """How many more jobs the search's token may have queued or running (read once a step, then counted)."""
        if self._room is None:
            self._room = room_for_jobs(self.store, self.search.token, self.cap)
        return self._room

    def run(self) -> MaxBatchSearch | None:
        """The next record, or None when nothing has changed."""
        if self.search.bounds is not None and not self._news():
            return None
        bounds = self.search.bounds or self._bounds()
        strategies = tuple(self._strategy(s, bounds) for s in self.search.strategies)
        if strategies == self.search.strategies and bounds == self.search.bounds:
            return None  # every strategy waits: for its batch's job, or for room under its token's cap
        done = all(s.ended for s in strategies)
        return self.search.revised(strategies=strategies, bounds=bounds,
                                   finished_at=self.store.clock() if done else None)

    def write(self, new: MaxBatchSearch) -> MaxBatchSearch | None:
        """Store ``new`` over the revision it was made from; when another process wrote first, cancel the jobs
        this step submitted for a search that has ended since."""
        revision = self.search.revision
        stored = self.store.update_max_batch(self.search.id, lambda cur: new if cur.revision == revision else None)
        if stored is None and self.submitted and self.store.get_max_batch(self.search.id).ended:
            for job_id in self.submitted:
                self.store.request_cancel(job_id)
        elif stored is not None and stored.ended:
            log.info("max-batch %s: ended; batches %s", stored.id,
                     ", ".join(f"{s.strategy} {s.batch}" for s in stored.strategies))
        return stored

    def _news(self) -> bool:
        """Whether a pending trial's job has ended (or is gone), or a strategy has yet to try its first batch."""
        for s in self.search.strategies:
            if s.ended:
                continue
            pending = s.pending
            if pending is None or pending.job_id not in self.jobs or self.jobs[pending.job_id].status.terminal:
                return True
        return False

    @cached_property
    def batched(self) -> BatchedGraph:
        graphs = {batch: Graph.from_json(self.store.get_graph(sha), limits=self.limits)
                  for batch, sha in self.search.graphs}
        return BatchedGraph.from_graphs(graphs)

    def _bounds(self) -> tuple[int, int]:
        search = BatchSearch.over(self.batched, self.search.budget)
        return search.ceiling, search.start

    def _strategy(self, s: StrategySearch, bounds: tuple[int, int]) -> StrategySearch:
        """``s`` after recording what its pending job gave and submitting batches until one is pending or done."""
        while s.ended is None:
            pending = s.pending
            if pending is None:
                batch = s.search(bounds).next_batch()
                if batch is None:
                    return s.end(JobStatus.SUCCEEDED)
                if self.room() <= 0:
                    return s  # the token's queued and running jobs fill its cap: this batch waits
                s = replace(s, trials=(*s.trials, self._submit(s, batch)))
                continue
            job = self.jobs.get(pending.job_id)
            if job is None:
                return s.end(JobStatus.FAILED, f"the job of batch {pending.batch} is gone")
            if not job.status.terminal:
                return s
            if job.status is not JobStatus.SUCCEEDED:
                return s.end(job.status, f"batch {pending.batch}: {job.error or job.status.value}")
            result = self.store.result_summaries([job.id]).get(job.id)
            if result is None:
                return s.end(JobStatus.FAILED, f"batch {pending.batch}: its job ended without a result")
            judged = pending.judged(result, self.search.budget)
            s = replace(s, trials=tuple(judged if t is pending else t for t in s.trials))
        return s

    def _submit(self, s: StrategySearch, batch: int) -> Trial:
        """The trial of ``batch`` for ``s``: its graph stored, its job submitted (or found) and dispatched."""
        graph = self.graphs.get(batch)
        if graph is None:
            graph = self.graphs[batch] = self.batched.at(batch)
            self.store.put_graph(graph.sha256, graph.to_json(), token=self.search.token)
        spec = SolveSpec(graph.sha256, self.search.budget, s.strategy, s.backend, self.search.time_limit_s,
                         self.search.mip_gap, convergence=self.search.convergence)
        job, fresh = self.store.submit(spec, graph_name=graph.name, token=self.search.token)
        if fresh:
            self.dispatch(job)
            self.submitted.append(job.id)
            self._room = self.room() - 1
        self.jobs[job.id] = job
        return Trial(batch, job.id, cost_cap(graph, self.search.max_overhead))

