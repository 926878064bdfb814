"""The API's schemas of max-batch searches (``/v1/max-batch``): the request, and the remat.max-batch/v1 document.

They sit beside :mod:`._schemas` (whose graph and solve options they reuse) and follow its rules:
constraints on the fields, so a malformed body is a 422 before any handler runs; what a schema cannot
say (graphs of different models, memory not affine in the batch) :class:`remat.schedules.BatchedGraph`
checks when the service fits the lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from remat.schedules import MAX_TOTAL_BYTES
from remat.solvers import ResultDocument, StrategyKind, get_strategy

from ._jobs import Job, JobStatus
from ._max_batches import MAX_BATCH_FORMAT, MaxBatchSearch, StrategySearch, Trial
from ._schemas import GraphIn, ProgressPublic, _SolveOptions

__all__ = ["BatchGraphIn", "MaxBatchList", "MaxBatchPublic", "MaxBatchRequest", "MaxBatchSummary",
           "StrategyBatch", "TrialPublic"]

MAX_GRAPHS = 8
"""Most graphs (batch sizes) one request may give: two are enough to fit the lines, a few more check them."""
REFERENCE = "checkpoint-all"
"""The strategy every batch is compared with: no rematerialization at all."""


class BatchGraphIn(BaseModel):
    """The model's training graph captured at one batch size."""

    model_config = ConfigDict(extra="forbid")

    batch: int = Field(ge=1, le=2**31, description="the batch size the graph was captured at")
    graph: GraphIn


class MaxBatchRequest(_SolveOptions):
    """``POST /v1/max-batch``: the largest batch each strategy fits in ``budget`` bytes within a cost cap."""

    graphs: list[BatchGraphIn] = Field(
        max_length=MAX_GRAPHS, description="the same model at two or more batch sizes; node memory, node cost and "
                                           "fixed memory are fitted as lines in the batch and checked")
    budget: int = Field(ge=0, le=MAX_TOTAL_BYTES, description="the device's bytes, fixed memory included")
    max_overhead: float | None = Field(None, ge=1, le=1e6, allow_inf_nan=False,
                                       description="largest cost over base cost a plan may have; default: one "
                                                   "extra forward pass at each batch")
    strategies: list[str] | None = Field(None, min_length=1, max_length=100,
                                         description="default: every strategy that applies to the graph")

    @field_validator("graphs")
    @classmethod
    def _two_batch_sizes(cls, graphs: list[BatchGraphIn]) -> list[BatchGraphIn]:
        batches = [g.batch for g in graphs]
        twice = sorted({b for b in batches if batches.count(b) > 1})
        if twice:
            raise ValueError(f"two graphs at batch {twice[0]}: give each batch size once")
        if len(batches) < 2:
            raise ValueError("give the model's graph at two or more batch sizes: memory and cost are fitted as "
                             "lines in the batch, and a line needs two points")
        return graphs

    @model_validator(mode="after")
    def _no_copies(self) -> MaxBatchRequest:
        if self.transfer is not None or self.host_budget is not None:
            raise ValueError("a max-batch search plans without copies to host memory: leave out 'transfer' and "
                             "'host_budget'")
        return self


class TrialPublic(BaseModel):
    """One batch a strategy tried, its job, and the verdict once the job has ended."""

    batch: int
    job_id: str
    status: JobStatus = Field(description="the job's status")
    ok: bool | None = Field(description="the plan fit the budget within the cost cap; null until the job has ended")
    result_status: str | None
    overhead: float | None
    peak_memory: int | None
    max_overhead: float = Field(description="the cost cap at this batch")

    @classmethod
    def of(cls, trial: Trial, jobs: Mapping[str, Job], strategy: StrategySearch) -> TrialPublic:
        job = jobs.get(trial.job_id)
        if trial.ok is not None:
            status = JobStatus.SUCCEEDED
        elif job is not None:
            status = job.status
        else:
            status = strategy.ended or JobStatus.QUEUED
        return cls(batch=trial.batch, job_id=trial.job_id, status=status, ok=trial.ok,
                   result_status=trial.result_status, overhead=trial.overhead, peak_memory=trial.peak_memory,
                   max_overhead=trial.max_overhead)


class StrategyBatch(BaseModel):
    """One strategy's answer: the largest batch it fits so far (final once it has succeeded) and its plan's numbers."""

    strategy: str
    backend: str
    status: JobStatus
    batch: int = Field(description="the largest batch whose plan fit within the cost cap (0: none)")
    overhead: float | None = Field(description="cost over base cost of that batch's plan")
    peak_memory: int | None
    job_id: str | None = Field(description="the job whose result holds that plan")
    vs_checkpoint_all: float | None = Field(description="batch over checkpoint-all's (null when it fits none)")
    vs_best_baseline: float | None = Field(description="batch over the largest batch of any other baseline")
    error: str | None
    progress: ProgressPublic | None = Field(description="the progress of the batch being solved")
    trials: list[TrialPublic]


class BatchOf(BaseModel):
    """A strategy and its batch."""

    strategy: str
    batch: int


class MaxBatchSummary(BaseModel):
    """A max-batch search in a list: what it asks and its status (as a job's)."""

    id: str
    status: JobStatus
    graph_name: str
    batches: list[int] = Field(description="the batch sizes of the graphs given")
    budget: int
    max_overhead: float | None
    created_at: datetime
    finished_at: datetime | None
    links: dict[str, str]

    @classmethod
    def _fields(cls, search: MaxBatchSearch, jobs: Mapping[str, Job]) -> dict[str, Any]:
        base = f"/v1/max-batch/{search.id}"
        return {"id": search.id, "status": search.status(jobs), "graph_name": search.graph_name,
                "batches": [b for b, _ in search.graphs], "budget": search.budget,
                "max_overhead": search.max_overhead, "created_at": datetime.fromtimestamp(search.created_at, tz=UTC),
                "finished_at": (datetime.fromtimestamp(search.finished_at, tz=UTC)
                                if search.finished_at is not None else None),
                "links": {"self": base, "cancel": f"{base}/cancel", "dashboard": f"/dashboard/max-batch/{search.id}"}}

    @classmethod
    def of(cls, search: MaxBatchSearch, jobs: Mapping[str, Job]) -> MaxBatchSummary:
        """``jobs`` holds the search's pending jobs (their statuses say whether it has started)."""
        return cls(**cls._fields(search, jobs))


class MaxBatchPublic(MaxBatchSummary):
    """The remat.max-batch/v1 document: each strategy's largest batch, against checkpoint-all's and the best
    baseline's, and the plan of the largest batch of all."""

    format: Literal["remat.max-batch/v1"] = MAX_BATCH_FORMAT
    graphs: list[dict[str, Any]] = Field(description="[{batch, graph_sha256}] of the graphs given")
    time_limit_s: float
    mip_gap: float
    convergence: dict[str, float] | None = Field(description="the rule that stopped each trial's solve before its "
                                                             "time limit (null: they ran to the limit)")
    ceiling: int | None = Field(description="the largest batch whose smallest feasible budget fits the device: no "
                                            "strategy can fit more (null until the search has looked)")
    checkpoint_all: BatchOf | None = Field(description="checkpoint-all's batch, when it is searched")
    best_baseline: BatchOf | None = Field(description="the largest batch of a baseline other than checkpoint-all")
    chosen: dict[str, Any] | None = Field(description="{strategy, batch, job_id, result}: the largest batch of any "
                                                      "strategy (the least overhead among equals) and its "
                                                      "remat.result/v1")
    strategies: list[StrategyBatch]

    @classmethod
    def of(cls, search: MaxBatchSearch, jobs: Mapping[str, Job],  # type: ignore[override]
           results: Mapping[str, ResultDocument]) -> MaxBatchPublic:
        """``jobs`` holds the pending jobs, with their progress; ``results`` the results of the best jobs (the chosen
        one's is the document's ``result``; summaries will do)."""
        by_name = {s.strategy: s for s in search.strategies}
        reference = by_name.get(REFERENCE)
        baselines = [s for s in search.strategies
                     if s.strategy != REFERENCE and get_strategy(s.strategy).kind is StrategyKind.BASELINE]
        best = max(baselines, key=lambda s: s.batch, default=None)
        chosen = _chosen(search)
        return cls(
            **cls._fields(search, jobs),
            graphs=[{"batch": b, "graph_sha256": sha} for b, sha in search.graphs],
            time_limit_s=search.time_limit_s, mip_gap=search.mip_gap,
            convergence=None if search.convergence is None else dict(search.convergence),
            ceiling=search.bounds[0] if search.bounds is not None else None,
            checkpoint_all=BatchOf(strategy=REFERENCE, batch=reference.batch) if reference is not None else None,
            best_baseline=BatchOf(strategy=best.strategy, batch=best.batch) if best is not None else None,
            chosen=None if chosen is None else {
                "strategy": chosen.strategy, "batch": chosen.batch, "job_id": _best_job(chosen),
                "result": results[_best_job(chosen)].to_json(summary=True) if _best_job(chosen) in results else None},
            strategies=[_strategy(s, jobs, reference, best) for s in search.strategies],
        )


def _best_job(s: StrategySearch) -> str:
    assert s.best is not None
    return s.best.job_id


def _chosen(search: MaxBatchSearch) -> StrategySearch | None:
    """The strategy with the largest batch, the least overhead among equals (the first of those in the search)."""
    def rank(s: StrategySearch) -> tuple[int, float]:
        overhead = s.best.overhead if s.best is not None else None
        return -s.batch, overhead if overhead is not None else float("inf")

    return min((s for s in search.strategies if s.best is not None), key=rank, default=None)


def _ratio(batch: int, to: StrategySearch | None) -> float | None:
    return batch / to.batch if to is not None and to.batch else None


def _strategy(s: StrategySearch, jobs: Mapping[str, Job], reference: StrategySearch | None,
              best: StrategySearch | None) -> StrategyBatch:
    pending = s.pending
    job = jobs.get(pending.job_id) if pending is not None and s.ended is None else None
    return StrategyBatch(
        strategy=s.strategy, backend=s.backend, status=s.status(jobs), batch=s.batch,
        overhead=s.best.overhead if s.best else None, peak_memory=s.best.peak_memory if s.best else None,
        job_id=s.best.job_id if s.best else None, vs_checkpoint_all=_ratio(s.batch, reference),
        vs_best_baseline=_ratio(s.batch, best), error=s.error,
        progress=ProgressPublic(**job.progress) if job is not None and job.progress else None,
        trials=[TrialPublic.of(t, jobs, s) for t in s.trials])


class MaxBatchList(BaseModel):
    max_batches: list[MaxBatchSummary]
    count: int
