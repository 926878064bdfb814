"""The job store: the one source of truth for jobs, their results, the graphs they solve, and sweeps.

:class:`JobStore` holds the named transitions (``submit``, ``mark_running``, ``renew``,
``mark_finished``, ``mark_failed``, ``request_cancel``, ``release``, ``reap``). Each applies a pure
function of :mod:`._jobs` through ``_update``, the one atomic read-modify-write a backend provides;
:class:`~remat.service.SqliteStore` (embedded) and :class:`~remat.service.RedisStore` (cluster)
differ only in storage.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _jobs
from ._jobs import Claim, Job, JobStatus, SolveSpec
from ._sweeps import Sweep

__all__ = ["KEEP", "RESULT_BULK", "JobStore"]

KEEP: Any = object()
"""Passed as ``result`` to ``_update``: leave the stored result as it is."""

RESULT_BULK = ("schedule", "plan", "log")
"""The fields of a remat.result/v1 that ``result_summaries`` leaves out (the bulk of a big graph's result)."""

Change = Callable[[Job], "Job | None"]


class JobStore(ABC):
    """Jobs, results, graphs and sweeps, with atomic state transitions.

    Parameters
    ----------
    lease_s : float
        How long a running job stays owned without a renewal.
    max_attempts : int
        Runs a job gets when the process running it dies.
    """

    def __init__(self, *, lease_s: float = 15.0, max_attempts: int = 2) -> None:
        self.lease_s = lease_s
        self.max_attempts = max_attempts

    # -- storage, per backend ----------------------------------------------------------------------

    @abstractmethod
    def _insert(self, job: Job) -> bool:
        """Store a new job unless one with its id exists; True when stored."""

    @abstractmethod
    def _update(self, job_id: str, change: Change, *, result: Mapping[str, Any] | None = KEEP) -> Job | None:
        """Atomically replace the job by ``change(job)`` (and its result, unless KEEP); None: unchanged."""

    @abstractmethod
    def get(self, job_id: str, *, with_result: bool = True) -> Job:
        """The job; JobNotFound if there is none."""

    @abstractmethod
    def get_many(self, job_ids: Sequence[str], *, with_result: bool = False) -> list[Job]:
        """The jobs that exist among ``job_ids``, in that order."""

    def result_summaries(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The results of those of ``job_ids`` that have one, less ``RESULT_BULK``: what lists and charts
        need, without reading whole schedules and plans."""
        return {j.id: {k: v for k, v in j.result.items() if k not in RESULT_BULK}
                for j in self.get_many(job_ids, with_result=True) if j.result is not None}

    @abstractmethod
    def list_jobs(self, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        """The most recently created jobs (without results), newest first."""

    @abstractmethod
    def jobs_with_status(self, status: JobStatus) -> list[Job]:
        """Every job in ``status`` (without results), oldest queued first."""

    @abstractmethod
    def count(self, status: JobStatus) -> int:
        """How many jobs are in ``status``."""

    @abstractmethod
    def count_active(self, token: str | None) -> int:
        """Queued or running jobs submitted with ``token``."""

    @abstractmethod
    def put_graph(self, sha256: str, doc: Mapping[str, Any]) -> None:
        """Keep a graph document under its hash (a no-op when it is already there)."""

    @abstractmethod
    def get_graph(self, sha256: str) -> dict[str, Any]:
        """The graph document stored under ``sha256``."""

    @abstractmethod
    def put_sweep(self, sweep: Sweep) -> None:
        """Keep a sweep (a no-op when it is already there)."""

    @abstractmethod
    def get_sweep(self, sweep_id: str) -> Sweep:
        """The sweep; JobNotFound if there is none."""

    @abstractmethod
    def list_sweeps(self, *, limit: int = 50) -> list[Sweep]:
        """The most recent sweeps, newest first."""

    @abstractmethod
    def ping(self) -> None:
        """Raise if the storage cannot be reached."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    # -- named transitions -------------------------------------------------------------------------

    def submit(self, spec: SolveSpec, *, graph_name: str, token: str | None) -> tuple[Job, bool]:
        """The job for ``spec``: new, shared with an identical one, or run again when its result cannot
        be reused. The graph must be stored first (put_graph). Returns (job, True when it needs running).
        """
        now = time.time()
        job = _jobs.new_job(spec, graph_name=graph_name, token=token, now=now)
        if self._insert(job):
            return job, True
        again = self._update(job.id, lambda j: _jobs.resubmit(j, now=now, token=token), result=None)
        if again is not None:
            return again, True
        return self.get(job.id), False

    def mark_running(self, job_id: str, owner: str) -> Job | None:
        """Claim a queued job for ``owner``; None when it is not queued any more."""
        return self._update(job_id, lambda j: _jobs.claim(j, owner=owner, now=time.time(), lease_s=self.lease_s))

    def renew(self, by: Claim, *, progress: Mapping[str, Any] | None = None,
              solver_pid: int | None = None) -> Job | None:
        """Extend the lease (and record progress); None when the claim was lost."""
        return self._update(by.job_id, lambda j: _jobs.renew(j, by, now=time.time(), lease_s=self.lease_s,
                                                             progress=progress, solver_pid=solver_pid))

    def mark_finished(self, by: Claim, result: Mapping[str, Any]) -> Job | None:
        return self._update(by.job_id, lambda j: _jobs.finish(j, by, now=time.time(), result=result),
                            result=result)

    def mark_failed(self, by: Claim, error: str, *, cancelled: bool = False) -> Job | None:
        return self._update(by.job_id, lambda j: _jobs.fail(j, by, now=time.time(), error=error,
                                                            cancelled=cancelled))

    def release(self, by: Claim) -> Job | None:
        return self._update(by.job_id, lambda j: _jobs.release(j, by, now=time.time()))

    def request_cancel(self, job_id: str) -> Job:
        """Cancel a queued job now, or flag a running one for its runner; returns the job as it stands."""
        changed = self._update(job_id, lambda j: _jobs.request_cancel(j, now=time.time()))
        return changed if changed is not None else self.get(job_id, with_result=False)

    def reap(self) -> list[Job]:
        """Take back running jobs that lost their runner (see lost_reason); returns those queued again."""
        now = time.time()
        requeued = []
        for job in self.jobs_with_status(JobStatus.RUNNING):
            if _jobs.lost_reason(job, now=now, lease_s=self.lease_s) is None:
                continue
            lost = self._update(job.id, lambda j: _jobs.lose(j, now=now, lease_s=self.lease_s,
                                                             max_attempts=self.max_attempts))
            if lost is not None and lost.status is JobStatus.QUEUED:
                requeued.append(lost)
        return requeued
