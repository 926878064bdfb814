"""The job store: the one source of truth for jobs, their results, the graphs they solve, sweeps and
max-batch searches.

:class:`JobStore` holds the named transitions (``submit``, ``claim_next``, ``mark_running``,
``renew``, ``mark_finished``, ``mark_failed``, ``request_cancel``, ``release``, ``reap``) and
retention (``expire``). Each transition applies a pure function of :mod:`._jobs` through
``_update``, the one atomic read-modify-write a backend provides; :class:`~remat.service.SqliteStore`
(embedded) and :class:`~remat.service.RedisStore` (cluster) differ only in storage.

Jobs belong to tokens (:attr:`Job.token`). Queued jobs are claimed fairly between tokens: the
token with the fewest running jobs first, then the one served longest ago, then its oldest job. A
reusable result is shared between tokens only as a copy (``share_results``), never as a job.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remat.solvers import ResultDocument

from . import _jobs
from ._errors import JobNotFound
from ._jobs import Claim, Job, JobStatus, SolveSpec
from ._max_batches import MaxBatchSearch
from ._sweeps import Sweep

__all__ = ["GRAPH_GRACE_S", "KEEP", "Expired", "JobStore", "Retention", "Usage"]

KEEP: Any = object()
"""Passed as ``result`` to ``_update``: leave the stored result as it is."""

GRAPH_GRACE_S = 3600.0
"""A graph stored (or submitted again) within this many seconds is kept even while no job refers to it yet.
(docs/tuning.md)"""

Change = Callable[[Job], "Job | None"]
SearchChange = Callable[[MaxBatchSearch], "MaxBatchSearch | None"]


@dataclass(frozen=True)
class Retention:
    """What ``expire`` keeps: ended jobs and sweeps younger than ``max_age_s``, at most ``max_jobs`` and
    ``max_sweeps`` of them (the newest); queued and running jobs always. Ended max-batch searches are kept
    as sweeps are (``max_sweeps`` of them), searches that go on always. A graph goes with the last job,
    sweep and search that refer to it."""

    max_age_s: float
    max_jobs: int
    max_sweeps: int


@dataclass(frozen=True)
class Usage:
    """What one token's records take in the store, in bytes of JSON: ``result_bytes`` of its jobs' results, and
    ``graph_bytes`` of the graphs its requests stored first (a graph another token stored before is shared and
    charged to that one); both fall as retention deletes them."""

    result_bytes: int = 0
    graph_bytes: int = 0


@dataclass(frozen=True)
class Expired:
    """How many records one ``expire`` pass deleted."""

    jobs: int = 0
    sweeps: int = 0
    graphs: int = 0
    max_batches: int = 0


class JobStore(ABC):
    """Jobs, results, graphs and sweeps, with atomic state transitions.

    Parameters
    ----------
    lease_s : float
        How long a running job stays owned without a renewal.
    max_attempts : int
        Runs a job gets when the process running it dies.
    share_results : bool
        Answer a token's request with a copy of another token's reusable result for the same request.
    clock : callable
        Seconds since the epoch (``time.time``); tests and benchmarks pass a simulated clock.
    """

    def __init__(self, *, lease_s: float = 15.0, max_attempts: int = 2, share_results: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.share_results = share_results
        self.clock = clock

    # -- storage, per backend ----------------------------------------------------------------------

    @abstractmethod
    def _insert(self, job: Job, result: ResultDocument | None = None) -> bool:
        """Store a new job (with its result, for a job answered at once) unless one with its id exists;
        True when stored."""

    @abstractmethod
    def _update(self, job_id: str, change: Change, *, result: ResultDocument | None = KEEP) -> Job | None:
        """Atomically replace the job by ``change(job)`` (and its result, unless KEEP); None: unchanged.

        A job that ends with a reusable result becomes the one ``cached_result`` finds for its request."""

    @abstractmethod
    def _cached_job(self, key: str) -> str | None:
        """The id of the job last recorded with a reusable result for the request ``key``, if any."""

    @abstractmethod
    def claim_next(self, owner: str) -> Job | None:
        """Claim the next queued job for ``owner``, fairly between tokens (see the module); None when none
        is queued."""

    @abstractmethod
    def get(self, job_id: str, *, with_result: bool = True) -> Job:
        """The job; JobNotFound if there is none."""

    @abstractmethod
    def get_many(self, job_ids: Sequence[str], *, with_result: bool = False) -> list[Job]:
        """The jobs that exist among ``job_ids``, in that order."""

    def result_summaries(self, job_ids: Sequence[str]) -> dict[str, ResultDocument]:
        """The results of those of ``job_ids`` that have one, less ``RESULT_BULK``: what lists and charts
        need, without reading whole schedules and plans."""
        return {j.id: j.result.summary() for j in self.get_many(job_ids, with_result=True) if j.result is not None}

    @abstractmethod
    def list_jobs(self, token: str | None, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        """``token``'s most recently created jobs (without results), newest first."""

    @abstractmethod
    def jobs_with_status(self, status: JobStatus) -> list[Job]:
        """Every job in ``status`` (without results), oldest queued first."""

    @abstractmethod
    def count(self, status: JobStatus) -> int:
        """How many jobs are in ``status``."""

    @abstractmethod
    def count_active(self, token: str | None) -> int:
        """Queued or running jobs of ``token``."""

    @abstractmethod
    def put_graph(self, sha256: str, doc: Mapping[str, Any], *, token: str | None = None) -> None:
        """Keep a graph document under its hash, charged to ``token`` (only its last use is updated when it is
        already there)."""

    @abstractmethod
    def has_graph(self, sha256: str) -> bool:
        """Whether a graph is stored under ``sha256``."""

    @abstractmethod
    def usage(self, token: str | None) -> Usage:
        """Bytes of ``token``'s stored results and of the graphs charged to it (see Usage)."""

    @abstractmethod
    def get_graph(self, sha256: str) -> dict[str, Any]:
        """The graph document stored under ``sha256``."""

    @abstractmethod
    def put_sweep(self, sweep: Sweep) -> None:
        """Keep a new sweep (a no-op when it is already there)."""

    @abstractmethod
    def replace_sweep(self, sweep: Sweep) -> None:
        """Store a sweep's new record (a no-op when the sweep is gone)."""

    @abstractmethod
    def get_sweep(self, sweep_id: str) -> Sweep:
        """The sweep; JobNotFound if there is none."""

    @abstractmethod
    def list_sweeps(self, token: str | None, *, limit: int = 50) -> list[Sweep]:
        """``token``'s most recent sweeps, newest first."""

    @abstractmethod
    def unplanned_sweeps(self) -> list[Sweep]:
        """Every sweep whose natural points are still to be added."""

    @abstractmethod
    def insert_max_batch(self, search: MaxBatchSearch) -> bool:
        """Keep a new max-batch search unless one with its id exists; True when stored."""

    @abstractmethod
    def update_max_batch(self, search_id: str, change: SearchChange) -> MaxBatchSearch | None:
        """Atomically replace the search by ``change(search)``; None: unchanged. JobNotFound if there is none."""

    @abstractmethod
    def get_max_batch(self, search_id: str) -> MaxBatchSearch:
        """The max-batch search; JobNotFound if there is none."""

    @abstractmethod
    def list_max_batches(self, token: str | None, *, limit: int = 50) -> list[MaxBatchSearch]:
        """``token``'s most recent max-batch searches, newest first."""

    @abstractmethod
    def active_max_batches(self) -> list[MaxBatchSearch]:
        """Every max-batch search that has not ended, oldest first."""

    @abstractmethod
    def expire(self, retention: Retention) -> Expired:
        """Delete what ``retention`` no longer keeps (see Retention) and the indexes that name it."""

    @abstractmethod
    def migrate(self) -> None:
        """Bring what is stored under an older layout up to date (idempotent, safe in several processes)."""

    @abstractmethod
    def ping(self) -> None:
        """Raise if the storage cannot be reached."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    # -- named transitions -------------------------------------------------------------------------

    def submit(self, spec: SolveSpec, *, graph_name: str, token: str | None) -> tuple[Job, bool]:
        """``token``'s job for ``spec``: its own while queued, running or holding a reusable result; else a
        new run, or a job answered at once by a copy of an identical request's reusable result. The graph
        must be stored first (put_graph). Returns (job, True when it needs running).
        """
        now = self.clock()
        fresh = _jobs.new_job(spec, graph_name=graph_name, token=token, now=now)
        try:
            current = self.get(fresh.id, with_result=False)
        except JobNotFound:
            current = None
        if not _jobs.needs_run(current):
            assert current is not None
            return current, False
        cached = self.cached_result(spec.key)
        job = fresh if cached is None else _jobs.answer(fresh, cached, now=now)
        if self._insert(job, cached):
            return job, cached is None
        again = self._update(job.id, lambda j: _jobs.rerun(j, job), result=cached)
        if again is not None:
            return again, cached is None
        return self.get(job.id, with_result=False), False

    def cached_result(self, key: str) -> ResultDocument | None:
        """A reusable result of the request ``key``, of any token (None when ``share_results`` is off)."""
        job_id = self._cached_job(key) if self.share_results else None
        if job_id is None:
            return None
        try:
            job = self.get(job_id)
        except JobNotFound:
            return None
        return job.result if job.spec.key == key and _jobs.reusable(job) else None

    def mark_running(self, job_id: str, owner: str) -> Job | None:
        """Claim a queued job for ``owner``; None when it is not queued any more."""
        return self._update(job_id, lambda j: _jobs.claim(j, owner=owner, now=self.clock(), lease_s=self.lease_s))

    def renew(self, by: Claim, *, progress: Mapping[str, Any] | None = None,
              solver_pid: int | None = None) -> Job | None:
        """Extend the lease (and record progress); None when the claim was lost."""
        return self._update(by.job_id, lambda j: _jobs.renew(j, by, now=self.clock(), lease_s=self.lease_s,
                                                             progress=progress, solver_pid=solver_pid))

    def mark_finished(self, by: Claim, result: ResultDocument) -> Job | None:
        return self._update(by.job_id, lambda j: _jobs.finish(j, by, now=self.clock(), result=result),
                            result=result)

    def mark_failed(self, by: Claim, error: str, *, cancelled: bool = False) -> Job | None:
        return self._update(by.job_id, lambda j: _jobs.fail(j, by, now=self.clock(), error=error,
                                                            cancelled=cancelled))

    def release(self, by: Claim) -> Job | None:
        return self._update(by.job_id, lambda j: _jobs.release(j, by, now=self.clock()))

    def request_cancel(self, job_id: str) -> Job:
        """Cancel a queued job now, or flag a running one for its runner; returns the job as it stands."""
        changed = self._update(job_id, lambda j: _jobs.request_cancel(j, now=self.clock()))
        return changed if changed is not None else self.get(job_id, with_result=False)

    def reap(self) -> list[Job]:
        """Take back running jobs that lost their runner (see lost_reason); returns those queued again."""
        now = self.clock()
        requeued = []
        for job in self.jobs_with_status(JobStatus.RUNNING):
            if _jobs.lost_reason(job, now=now, lease_s=self.lease_s) is None:
                continue
            lost = self._update(job.id, lambda j: _jobs.lose(j, now=now, lease_s=self.lease_s,
                                                             max_attempts=self.max_attempts))
            if lost is not None and lost.status is JobStatus.QUEUED:
                requeued.append(lost)
        return requeued
