"""Max-batch searches: the largest batch each strategy fits on a device, every batch tried an ordinary job.

A search keeps the graphs of one model at two or more batch sizes (memory and cost fitted as lines
in the batch, :class:`remat.schedules.BatchedGraph`), a device budget, a cost cap, and per strategy
the bisection of :class:`remat.solvers.BatchSearch`. The executors' maintenance
(:mod:`._max_batch_steps`) finds its bounds, submits each batch to try as a solve job of the search's
token and records each verdict once that job has ended, so no strategy runs in the API's threads.

A record changes only through a compare-and-set on its ``revision``, so a cancel and the maintenance of
several processes never overwrite one another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from remat.solvers import BatchSearch, BatchTrial, ResultDocument

from ._jobs import Job, JobStatus, remat_version
from ._sweeps import sweep_status

__all__ = ["MAX_BATCH_FORMAT", "MaxBatchSearch", "StrategySearch", "Trial", "new_max_batch", "restartable"]

MAX_BATCH_FORMAT: Final = "remat.max-batch/v1"


@dataclass(frozen=True)
class Trial:
    """One batch of one strategy's search and the job that solves it; its verdict once the job has ended."""

    batch: int
    job_id: str
    max_overhead: float
    """The cost cap at this batch (one extra forward pass, unless the request set one)."""
    ok: bool | None = None
    """Whether the plan fit the budget within the cap; None while the job has not ended."""
    result_status: str | None = None
    overhead: float | None = None
    peak_memory: int | None = None

    def judged(self, result: ResultDocument, budget: int) -> Trial:
        """This trial with the verdict on ``result`` (its job's remat.result/v1, a summary will do)."""
        peak = result.peak_memory
        verdict = BatchTrial.judged(self.batch, status=result.status, overhead=result.overhead,
                                    fits=peak is not None and peak <= budget, max_overhead=self.max_overhead)
        return replace(self, ok=verdict.ok, result_status=verdict.status, overhead=verdict.overhead,
                       peak_memory=peak)


@dataclass(frozen=True)
class StrategySearch:
    """One strategy's bisection: the batches tried so far and, once it has ended, how."""

    strategy: str
    backend: str
    trials: tuple[Trial, ...] = ()
    ended: JobStatus | None = None
    """succeeded (the answer is known), failed (a trial's job failed) or cancelled; None while it goes on."""
    error: str | None = None

    @property
    def best(self) -> Trial | None:
        """The largest batch that fit, None when none has."""
        return max((t for t in self.trials if t.ok), key=lambda t: t.batch, default=None)

    @property
    def batch(self) -> int:
        return self.best.batch if self.best is not None else 0

    @property
    def pending(self) -> Trial | None:
        """The trial whose job has not ended, if any (a strategy tries one batch at a time)."""
        return next((t for t in self.trials if t.ok is None), None)

    def search(self, bounds: tuple[int, int]) -> BatchSearch:
        """The bisection as it stands, from the (ceiling, start) ``bounds`` and the verdicts so far."""
        verdicts = [BatchTrial(t.batch, t.result_status or "", t.overhead, t.max_overhead, t.ok)
                    for t in self.trials if t.ok is not None]
        return BatchSearch(*bounds, verdicts)

    def status(self, jobs: Mapping[str, Job]) -> JobStatus:
        """Its status as a job's: how it ended; else running once a batch has been solved or is being solved."""
        if self.ended is not None:
            return self.ended
        pending = self.pending
        started = any(t.ok is not None for t in self.trials) or (
            pending is not None and pending.job_id in jobs and jobs[pending.job_id].status is not JobStatus.QUEUED)
        return JobStatus.RUNNING if started else JobStatus.QUEUED

    def end(self, status: JobStatus, error: str | None = None) -> StrategySearch:
        return replace(self, ended=status, error=error)

    def to_record(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "backend": self.backend, "trials": [asdict(t) for t in self.trials],
                "ended": self.ended.value if self.ended is not None else None, "error": self.error}

    @classmethod
    def from_record(cls, doc: Mapping[str, Any]) -> StrategySearch:
        return cls(doc["strategy"], doc["backend"], tuple(Trial(**t) for t in doc["trials"]),
                   JobStatus(doc["ended"]) if doc["ended"] is not None else None, doc["error"])


@dataclass(frozen=True)
class MaxBatchSearch:
    """The stored record of a max-batch search."""

    id: str
    graphs: tuple[tuple[int, str], ...]
    """(batch, sha256 of the graph captured at that batch), by ascending batch."""
    graph_name: str
    budget: int
    """The device's bytes, fixed memory included."""
    max_overhead: float | None
    """The cost cap as cost over base cost; None: one extra forward pass at each batch."""
    time_limit_s: float
    mip_gap: float
    strategies: tuple[StrategySearch, ...]
    created_at: float
    token: str | None = None
    """Id of the token that owns it (see :attr:`remat.service.Job.token`)."""
    convergence: Mapping[str, float] | None = None
    """The convergence rule of every trial's solve (see :attr:`remat.service.SolveSpec.convergence`)."""
    bounds: tuple[int, int] | None = None
    """(ceiling, start) of the bisection (see :class:`remat.solvers.BatchSearch`), once its first step found them."""
    revision: int = 0
    finished_at: float | None = None

    @property
    def ended(self) -> bool:
        return self.finished_at is not None

    @property
    def pending_job_ids(self) -> list[str]:
        """The jobs of the trials that have no verdict yet."""
        return [t.job_id for s in self.strategies for t in s.trials if t.ok is None]

    @property
    def best_job_ids(self) -> list[str]:
        """The job of each strategy's largest batch that fit."""
        return [s.best.job_id for s in self.strategies if s.best is not None]

    def status(self, jobs: Mapping[str, Job]) -> JobStatus:
        """The search's status from its strategies' (as a sweep's from its jobs'); ``jobs`` holds the pending ones."""
        return sweep_status(s.status(jobs) for s in self.strategies)

    def revised(self, **changes: Any) -> MaxBatchSearch:
        """The next revision of the record, with ``changes``."""
        return replace(self, revision=self.revision + 1, **changes)

    def cancelled(self, *, now: float) -> MaxBatchSearch | None:
        """Every strategy still searching ends cancelled; None when the search has already ended."""
        if self.ended:
            return None
        strategies = tuple(s if s.ended else s.end(JobStatus.CANCELLED, "cancelled") for s in self.strategies)
        return self.revised(strategies=strategies, finished_at=now)

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "graphs": [list(g) for g in self.graphs], "graph_name": self.graph_name,
                "budget": self.budget, "max_overhead": self.max_overhead, "time_limit_s": self.time_limit_s,
                "mip_gap": self.mip_gap, "strategies": [s.to_record() for s in self.strategies],
                "created_at": self.created_at, "token": self.token, "convergence": self.convergence,
                "bounds": list(self.bounds) if self.bounds is not None else None, "revision": self.revision,
                "finished_at": self.finished_at}

    @classmethod
    def from_record(cls, doc: Mapping[str, Any]) -> MaxBatchSearch:
        bounds = doc["bounds"]
        return cls(doc["id"], tuple((b, sha) for b, sha in doc["graphs"]), doc["graph_name"], doc["budget"],
                   doc["max_overhead"], doc["time_limit_s"], doc["mip_gap"],
                   tuple(StrategySearch.from_record(s) for s in doc["strategies"]), doc["created_at"], doc["token"],
                   doc.get("convergence"), (bounds[0], bounds[1]) if bounds is not None else None, doc["revision"],
                   doc["finished_at"])


def new_max_batch(graphs: Mapping[int, str], *, graph_name: str, budget: int, max_overhead: float | None,
                  strategies: Sequence[tuple[str, str]], time_limit_s: float, mip_gap: float, token: str | None,
                  now: float, convergence: Mapping[str, float] | None = None) -> MaxBatchSearch:
    """A new search of ``strategies`` ((name, backend) pairs); one token's identical requests get the same id,
    and no two tokens ever do (the id hashes the canonical request with the token)."""
    canon = {"format": MAX_BATCH_FORMAT, "remat": remat_version(), "graphs": sorted(graphs.items()),
             "budget": budget, "max_overhead": max_overhead, "strategies": [list(s) for s in strategies],
             "time_limit_s": float(time_limit_s), "mip_gap": float(mip_gap)}
    if convergence is not None:
        canon["convergence"] = dict(convergence)
    key = hashlib.sha256(json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    search_id = key if token is None else hashlib.sha256(f"{key}:{token}".encode()).hexdigest()
    return MaxBatchSearch(search_id, tuple(sorted(graphs.items())), graph_name, budget, max_overhead, time_limit_s,
                          mip_gap, tuple(StrategySearch(name, backend) for name, backend in strategies), now, token,
                          convergence)


def restartable(search: MaxBatchSearch) -> bool:
    """True when an identical request should start the search afresh: it ended without an answer for some
    strategy (a trial failed or it was cancelled)."""
    return search.ended and any(s.ended is not JobStatus.SUCCEEDED for s in search.strategies)
