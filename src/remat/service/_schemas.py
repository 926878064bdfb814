"""The API's pydantic schemas. They exist only here: requests become remat objects once, at the boundary.

Constraints sit on the fields, so a malformed body is a 422 before any handler runs; what a schema
cannot say (unknown deps, cycles, duplicate ids) :meth:`GraphIn.to_graph` checks through
:meth:`remat.schedules.Graph.from_json`, whose InvalidGraph names the node and field.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from remat.schedules import (
    GRAPH_FORMAT,
    MAX_BUDGET_RATIO,
    MAX_TOTAL_BYTES,
    TRANSFER_PROFILES,
    Graph,
    GraphLimits,
    Transfer,
)
from remat.solvers import DEFAULT_CONVERGENCE, DEFAULT_MIP_GAP, RESULT_FORMAT

from ._jobs import Job, JobStatus
from ._sweeps import Sweep, status_counts
from ._values import JsonRequest, OptionName, OptionValue

__all__ = [
    "GraphIn",
    "JobList",
    "JobPublic",
    "NodeIn",
    "ProgressPublic",
    "ResultPublic",
    "SolveRequest",
    "StrategiesPublic",
    "StrategyPublic",
    "SweepJob",
    "SweepList",
    "SweepPublic",
    "SweepRequest",
    "SweepSummary",
]


MAX_ID = 1000
"""Most characters of a node's id (and so of each of its deps)."""


class NodeIn(BaseModel):
    """One operation of a remat.graph/v1; fields other than these are kept as metadata."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=MAX_ID)
    deps: list[Annotated[str, StringConstraints(max_length=MAX_ID)]] = Field(
        default_factory=list, description="ids of earlier nodes whose outputs it reads")
    cost: float = Field(ge=0, allow_inf_nan=False)
    memory: int = Field(ge=0, le=MAX_TOTAL_BYTES, description="bytes of its output")
    kind: Literal["forward", "backward"] = "forward"


class GraphIn(BaseModel):
    """A training graph in remat.graph/v1: nodes in execution (topological) order."""

    model_config = ConfigDict(extra="allow")

    format: Literal["remat.graph/v1"] = Field(description=f"always {GRAPH_FORMAT!r}")
    name: str = Field("", max_length=1000)
    cost_unit: str = Field("", max_length=100)
    fixed_memory: int = Field(0, ge=0, le=MAX_TOTAL_BYTES, description="bytes resident throughout")
    nodes: list[NodeIn] = Field(min_length=1)

    def to_graph(self, limits: GraphLimits) -> Graph:
        """The validated Graph; InvalidGraph names the node and field of what is wrong."""
        return Graph.from_json(self.model_dump(), limits=limits)


class ConvergenceIn(BaseModel):
    """When a solve stops before its time limit: its best cost improved by less than ``tolerance`` in ``window_s``,
    longer while the plan is far from its lower bound (:class:`remat.solvers.Convergence`)."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(DEFAULT_CONVERGENCE.window_s, gt=0, le=3600, allow_inf_nan=False)
    tolerance: float = Field(DEFAULT_CONVERGENCE.tolerance, ge=0, lt=1, allow_inf_nan=False,
                             description="a fraction of the best cost")
    gap_per_window: float = Field(DEFAULT_CONVERGENCE.gap_per_window, gt=0, lt=1, allow_inf_nan=False,
                                  description="each such fraction of gap between the best plan and its lower bound "
                                              "makes the window one window_s longer")
    max_windows: float = Field(DEFAULT_CONVERGENCE.max_windows, ge=1, le=100, allow_inf_nan=False,
                               description="the longest window, in windows of window_s (also the window before "
                                           "any bound is proved)")
    horizon_s: float = Field(DEFAULT_CONVERGENCE.horizon_s, gt=0, le=86400, allow_inf_nan=False,
                             description="seconds from the start after which the window is window_s whatever "
                                         "the gap: a stalled solve answers then")


class _SolveOptions(JsonRequest):
    model_config = ConfigDict(extra="forbid")

    backend: str = Field("auto", max_length=100, description="solver backend of checkmate; auto picks one")
    time_limit_s: float | None = Field(None, gt=0, allow_inf_nan=False,
                                       description="seconds per solve at most; default and maximum are server settings")
    convergence: ConvergenceIn | None = Field(
        ConvergenceIn(window_s=DEFAULT_CONVERGENCE.window_s, tolerance=DEFAULT_CONVERGENCE.tolerance,
                      gap_per_window=DEFAULT_CONVERGENCE.gap_per_window, max_windows=DEFAULT_CONVERGENCE.max_windows,
                      horizon_s=DEFAULT_CONVERGENCE.horizon_s),
        description="stop a solve once its best plan improved by less than tolerance (a fraction) in window_s "
                    "seconds, one window_s more for each gap_per_window of gap to its lower bound, up to "
                    "max_windows, and window_s whatever the gap from horizon_s after the start (default: 0.25 % "
                    "in 2 s, 2 s more per point of gap, up to 18 s; from 18 s, 2 s); null runs every solve to its "
                    "time limit")
    mip_gap: float = Field(DEFAULT_MIP_GAP, ge=0, lt=1, description="relative gap that counts as optimal")
    transfer: dict[str, Any] | None = Field(
        None, max_length=3, examples=[{"bandwidth": 5e7, "latency": 0.01},
                                      {"profile": "pcie5-x16", "seconds_per_cost_unit": 0.001}],
        description="how long copies to host memory and back last, for strategies that offload: "
                    "{bandwidth (bytes per cost unit), latency (cost units)} in the graph's units, or "
                    f"{{profile ({', '.join(sorted(TRANSFER_PROFILES))}), seconds_per_cost_unit, latency_s}}")
    host_budget: int | None = Field(None, ge=0, le=MAX_TOTAL_BYTES,
                                    description="bytes the plan's host copies may hold at most")

    def convergence_json(self) -> dict[str, float] | None:
        """The convergence rule as a job records it (None: run to the time limit)."""
        return None if self.convergence is None else self.convergence.model_dump()

    def to_transfer(self) -> Transfer | None:
        """The transfer parameters; InvalidRequest (a 422) says which form is expected when they are wrong."""
        return None if self.transfer is None else Transfer.from_json(self.transfer)


class SolveRequest(_SolveOptions):
    """``POST /v1/solve``: a graph and exactly one of ``budget`` (bytes) and ``budget_ratio``."""

    graph: GraphIn
    budget: int | None = Field(None, ge=0, le=MAX_TOTAL_BYTES, description="bytes, fixed memory included")
    budget_ratio: float | None = Field(None, gt=0, le=MAX_BUDGET_RATIO, allow_inf_nan=False,
                                       description="fraction of the checkpoint-all peak")
    strategy: str = Field("checkmate", min_length=1, max_length=100)
    options: dict[OptionName, OptionValue] = Field(
        default_factory=dict, max_length=20,
        description="the strategy's own options (GET /v1/strategies lists them); unknown ones are refused")
    wait_s: float | None = Field(None, ge=0, allow_inf_nan=False,
                                 description="seconds to wait for the result before answering 202")

    @model_validator(mode="after")
    def _one_budget(self) -> SolveRequest:
        if (self.budget is None) == (self.budget_ratio is None):
            raise ValueError("give exactly one of 'budget' (bytes) and 'budget_ratio'")
        return self


class SweepRequest(_SolveOptions):
    """``POST /v1/sweeps``: every strategy (or those named) over a range of budgets (or those given)."""

    graph: GraphIn
    strategies: list[str] | None = Field(None, min_length=1, max_length=100)
    budgets: list[int] | None = Field(None, min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _budgets_in_range(self) -> SweepRequest:
        if self.budgets is not None and not all(0 <= b <= MAX_TOTAL_BYTES for b in self.budgets):
            raise ValueError(f"every budget must be a whole number of bytes in [0, {MAX_TOTAL_BYTES}]")
        return self


class ProgressPublic(BaseModel):
    elapsed_s: float
    incumbent_cost: float | None = None
    lower_bound: float | None = None
    gap: float | None = None
    message: str | None = None


class ResultPublic(BaseModel):
    """A remat.result/v1 (the schedule and plan are documented in docs/results.md and docs/plans.md)."""

    model_config = ConfigDict(extra="allow")

    format: Literal["remat.result/v1"] = RESULT_FORMAT
    graph_name: str
    graph_sha256: str
    strategy: str
    backend: str | None
    status: Literal["optimal", "feasible", "over_budget", "infeasible", "timeout", "cancelled", "error"]
    budget: int
    peak_memory: int | None
    cost: float | None
    base_cost: float
    overhead: float | None
    lower_bound: float | None
    gap: float | None
    host_peak_memory: int | None = Field(None, description="bytes the plan's host copies hold at most (0: none)")
    host_budget: int | None = None
    transfer: dict[str, float] | None = Field(None, description="the copy times simulated, in the graph's units")
    min_feasible_budget: int
    smallest_peak: int | None = Field(None, description="with no plan that fits: the lowest peak of a plan it reached")
    checkpoint_all_peak: int
    solve_time_s: float
    schedule: dict[str, Any] | None
    plan: list[dict[str, Any]] | None
    fallback: str | None
    log: list[str]


def _time(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


class JobPublic(BaseModel):
    """A job as ``GET /v1/jobs/{id}`` shows it; ``result`` is the remat.result/v1 once it has ended."""

    id: str
    status: JobStatus
    graph_name: str
    graph_sha256: str
    strategy: str
    backend: str
    budget: int
    time_limit_s: float
    mip_gap: float
    options: dict[str, Any] = Field(description="the strategy's own options the job was asked with")
    transfer: dict[str, float] | None = Field(description="the request's transfer parameters, in the graph's units")
    host_budget: int | None
    convergence: dict[str, float] | None = Field(description="the rule that stops the solve before its time limit "
                                                             "(null: it runs to the limit)")
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: ProgressPublic | None
    error: str | None
    history: list[str] = Field(description="what happened to earlier attempts (lost runners, restarts)")
    result: dict[str, Any] | None = Field(None, description="remat.result/v1 (see ResultPublic)")
    links: dict[str, str]

    @classmethod
    def of(cls, job: Job, *, with_result: bool = True) -> JobPublic:
        s = job.spec
        base = f"/v1/jobs/{job.id}"
        return cls(
            id=job.id, status=job.status, graph_name=job.graph_name, graph_sha256=s.graph_sha256,
            strategy=s.strategy, backend=s.backend, budget=s.budget, time_limit_s=s.time_limit_s,
            mip_gap=s.mip_gap, options=dict(s.options), transfer=None if s.transfer is None else dict(s.transfer),
            host_budget=s.host_budget, convergence=None if s.convergence is None else dict(s.convergence),
            attempts=job.attempts, cancel_requested=job.cancel_requested,
            created_at=datetime.fromtimestamp(job.created_at, tz=UTC), started_at=_time(job.started_at),
            finished_at=_time(job.finished_at),
            progress=ProgressPublic(**job.progress) if job.progress else None, error=job.error,
            history=list(job.history),
            result=job.result.to_json() if with_result and job.result is not None else None,
            links={"self": base, "cancel": f"{base}/cancel", "events": f"{base}/events"},
        )


class JobList(BaseModel):
    jobs: list[JobPublic]
    count: int


class SweepJob(BaseModel):
    id: str
    strategy: str
    budget: int
    status: JobStatus


class SweepSummary(BaseModel):
    """A sweep in a list: its status (as for jobs) and how many of its jobs are in each status."""

    id: str
    status: JobStatus
    graph_name: str
    graph_sha256: str
    created_at: datetime
    counts: dict[str, int]

    @classmethod
    def _fields(cls, sweep: Sweep, jobs: list[Job]) -> dict[str, Any]:
        return {"id": sweep.id, "status": sweep.status(j.status for j in jobs), "graph_name": sweep.graph_name,
                "graph_sha256": sweep.graph_sha256, "created_at": datetime.fromtimestamp(sweep.created_at, tz=UTC),
                "counts": status_counts(j.status for j in jobs)}

    @classmethod
    def of(cls, sweep: Sweep, jobs: list[Job]) -> SweepSummary:
        return cls(**cls._fields(sweep, jobs))


class SweepPublic(SweepSummary):
    """A sweep with its jobs' statuses and the remat.result/v1 of every job that has ended."""

    natural_budgets: dict[str, int] = Field(description="each heuristic's own peak when unconstrained")
    jobs: list[SweepJob]
    results: list[dict[str, Any]] = Field(description="remat.result/v1 of every job that has one")

    @classmethod
    def of(cls, sweep: Sweep, jobs: list[Job], results: list[dict[str, Any]] | None = None) -> SweepPublic:
        """``results`` default to the jobs' own (loaded with them); a caller may pass summaries instead."""
        return cls(
            **cls._fields(sweep, jobs), natural_budgets=dict(sweep.natural),
            jobs=[SweepJob(id=j.id, strategy=j.spec.strategy, budget=j.spec.budget, status=j.status) for j in jobs],
            results=[j.result.to_json() for j in jobs if j.result is not None] if results is None else results,
        )


class SweepList(BaseModel):
    sweeps: list[SweepSummary]
    count: int


class OptionPublic(BaseModel):
    """One option of a strategy: what it does and the values it accepts (any other is a 422 at admission)."""

    summary: str
    accepts: str = Field(description="the values it accepts: true or false, a range of whole numbers, or names")


class StrategyPublic(BaseModel):
    name: str
    summary: str
    backends: list[str] = Field(description="solver backends the strategy can use (none for heuristics)")
    knob: str | None = None
    offloads: bool = Field(False, description="its plans copy values to host memory and back: it needs 'transfer'")
    options: dict[str, OptionPublic] = Field(default_factory=dict, description="the options it reads, by name")
    max_nodes: int | None = Field(None, description="the most nodes of a graph it takes, for a strategy whose time or "
                                                    "memory grows faster than the graph; null: as many as the "
                                                    "service takes")


class StrategiesPublic(BaseModel):
    strategies: list[StrategyPublic]
    installed_backends: list[str] = Field(description="solver backends installed on this server")
