"""From the service's job store to what the dashboard shows: a sweep's grid, a job's plan.

What an ended job produced never changes (a job run again ends at another time), so the numbers of
ended jobs, the bounds of graphs and the views of recently shown jobs are kept in memory: a live
sweep page's poll then reads only the jobs that ended since, and a job page seen again does not
replay and lay out its plan again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from remat.report import PlanStats, SweepCell, SweepView, job_figures
from remat.schedules import Graph
from remat.solvers import ResultDocument

from .._errors import JobNotFound
from .._jobs import Job, JobStatus
from .._max_batch_schemas import MaxBatchSummary
from .._schemas import JobPublic, SweepSummary
from .._service import Service
from .._sweeps import Sweep

__all__ = ["JobView", "load_job", "load_recent", "load_sweep"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Memo(Generic[K, V]):
    """The ``size`` values used last, by key; safe to share between the server's threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: Iterable[K], load: Callable[[list[K]], dict[K, V]]) -> dict[K, V]:
        """The values of ``keys``; those not kept are loaded together by ``load`` (which may skip some)."""
        with self._lock:
            found = {k: self._values[k] for k in keys if k in self._values}
            for k in found:
                self._values.move_to_end(k)
        missing = [k for k in keys if k not in found]
        loaded = load(missing) if missing else {}
        with self._lock:
            self._values.update(loaded)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return {**found, **loaded}

    def get(self, key: K, load: Callable[[], V]) -> V:
        return self.get_many([key], lambda _: {key: load()})[key]


_SUMMARIES: _Memo[tuple[str, float | None], ResultDocument] = _Memo(20_000)
"""Result summaries of ended jobs, by (job id, end time)."""
_BOUNDS: _Memo[str, tuple[int, int]] = _Memo(256)
"""(smallest feasible budget, checkpoint-all peak) of graphs, by sha256."""


def _graph(service: Service, sha256: str) -> Graph:
    return Graph.from_json(service.store.get_graph(sha256), limits=service.settings.graph_limits)


def _bounds(service: Service, sha256: str) -> tuple[int, int]:
    def load() -> tuple[int, int]:
        graph = _graph(service, sha256)
        return graph.min_feasible_budget, graph.checkpoint_all_peak

    return _BOUNDS.get(sha256, load)


def _summaries(service: Service, jobs: Iterable[Job]) -> dict[str, ResultDocument]:
    """The result summaries of the ended ones among ``jobs``, by job id."""
    keys = [(j.id, j.finished_at) for j in jobs if j.status.terminal]

    def load(missing: list[tuple[str, float | None]]) -> dict[tuple[str, float | None], ResultDocument]:
        ended = dict(missing)
        return {(i, ended[i]): s for i, s in service.store.result_summaries(list(ended)).items()}

    return {job_id: summary for (job_id, _), summary in _SUMMARIES.get_many(keys, load).items()}


def load_sweep(service: Service, sweep: Sweep) -> SweepView:
    """The sweep's grid as it stands: every point's job status and, once solved, its result's numbers."""
    jobs = {j.id: j for j in service.sweep_jobs(sweep, with_result=False)}
    summaries = _summaries(service, jobs.values())
    low, high = _bounds(service, sweep.graph_sha256)
    cells = tuple(SweepCell(p.strategy, p.budget, jobs[p.job_id].status.value, summaries.get(p.job_id), p.job_id)
                  for p in sweep.points if p.job_id in jobs)
    status = sweep.status(j.status for j in jobs.values())
    return SweepView(
        graph_name=sweep.graph_name, min_feasible_budget=low, checkpoint_all_peak=high,
        strategies=tuple(dict.fromkeys(p.strategy for p in sweep.points)),
        budgets=tuple(sorted({p.budget for p in sweep.points})), cells=cells, natural=dict(sweep.natural),
        status=status.value, done=status.terminal)


def load_recent(service: Service, token: str | None, *, sweeps: int, jobs: int) -> dict[str, Any]:
    """The front page's lists: ``token``'s recent sweeps with their jobs' counts, its recent max-batch searches
    (as many as sweeps), its recent jobs with their results' numbers."""
    recent = service.store.list_jobs(token, limit=jobs)
    return {"sweeps": [SweepSummary.of(s, service.sweep_jobs(s, with_result=False)).model_dump()
                       for s in service.store.list_sweeps(token, limit=sweeps)],
            "max_batches": [MaxBatchSummary.of(m, service.max_batch_jobs(m)).model_dump()
                            for m in service.store.list_max_batches(token, limit=sweeps)],
            "jobs": [JobPublic.of(j).model_dump() for j in recent], "summaries": _summaries(service, recent)}


@dataclass(frozen=True)
class JobView:
    """A job as its page shows it: the job, its result, its plan's figures and statistics."""

    job: dict[str, Any]
    result: ResultDocument | None
    figures: dict[str, Any] = field(default_factory=dict)
    stats: PlanStats | None = None
    notice: str | None = None

    @property
    def ended(self) -> bool:
        return JobStatus(self.job["status"]).terminal


_JOB_VIEWS: _Memo[tuple[str, float | None], JobView] = _Memo(32)
"""Views of the ended jobs shown last, by (job id, end time)."""


def load_job(service: Service, job: Job) -> JobView:
    """The job (read without its result) and its result, with the plan replayed through the simulator and
    laid out when it has one."""
    if not job.status.terminal:
        return _job_view(service, job)
    return _JOB_VIEWS.get((job.id, job.finished_at), lambda: _job_view(service, service.store.get(job.id)))


def _job_view(service: Service, job: Job) -> JobView:
    public = JobPublic.of(job, with_result=False).model_dump()
    result = job.result
    if result is None or result.plan is None:
        return JobView(public, result)
    try:
        graph = _graph(service, job.spec.graph_sha256)
    except JobNotFound:
        return JobView(public, result, notice="This job's graph is no longer stored, so its plan cannot be drawn.")
    figures, stats = job_figures(graph, result)
    return JobView(public, result, figures, stats)
