"""From the service's job store to what the dashboard shows: a sweep's grid, a job's plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remat.schedules import Graph, JobNotFound

from .._jobs import Job
from .._schemas import JobPublic
from .._service import Service
from .._sweeps import sweep_status
from ._job_view import PlanStats, job_figures
from ._sweep_view import SweepCell, SweepView

__all__ = ["JobView", "load_job", "load_sweep"]


def _graph(service: Service, sha256: str) -> Graph:
    return Graph.from_json(service.store.get_graph(sha256), limits=service.settings.graph_limits)


def load_sweep(service: Service, sweep_id: str) -> SweepView:
    """The sweep's grid as it stands: every point's job status and, once solved, its result's numbers."""
    sweep = service.store.get_sweep(sweep_id)
    jobs = {j.id: j for j in service.sweep_jobs(sweep, with_result=False)}
    summaries = service.store.result_summaries([i for i, j in jobs.items() if j.status.terminal])
    graph = _graph(service, sweep.graph_sha256)
    cells = tuple(SweepCell(p.strategy, p.budget, jobs[p.job_id].status.value, summaries.get(p.job_id), p.job_id)
                  for p in sweep.points if p.job_id in jobs)
    return SweepView(
        graph_name=sweep.graph_name, min_feasible_budget=graph.min_feasible_budget,
        checkpoint_all_peak=graph.checkpoint_all_peak,
        strategies=tuple(dict.fromkeys(p.strategy for p in sweep.points)),
        budgets=tuple(sorted({p.budget for p in sweep.points})), cells=cells, natural=dict(sweep.natural),
        status=sweep_status(j.status for j in jobs.values()).value)


@dataclass(frozen=True)
class JobView:
    """A job as its page shows it: the job, its result, its plan's figures and statistics."""

    job: dict[str, Any]
    result: dict[str, Any] | None
    figures: dict[str, Any] = field(default_factory=dict)
    stats: PlanStats | None = None
    notice: str | None = None


def load_job(service: Service, job: Job) -> JobView:
    """The job (with its result) and, when the result has a plan, the plan replayed through the simulator."""
    public = JobPublic.of(job, with_result=False).model_dump()
    result = dict(job.result) if job.result is not None else None
    if result is None or result.get("plan") is None:
        return JobView(public, result)
    try:
        graph = _graph(service, job.spec.graph_sha256)
    except JobNotFound:
        return JobView(public, result, notice="This job's graph is no longer stored, so its plan cannot be drawn.")
    figures, stats = job_figures(graph, result)
    return JobView(public, result, figures, stats)
