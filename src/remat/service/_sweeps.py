"""Sweeps: one graph solved by many strategies over many budgets, each point an ordinary job.

A default sweep is made in two steps. Submitting it creates every strategy's job at evenly spaced
budgets up to the checkpoint-all peak; a heuristic's job at that top budget is its unconstrained
run, whose peak is the heuristic's natural budget. Once those runs have ended, the executors'
maintenance adds every strategy at each natural budget and marks the sweep ``planned``
(:mod:`._sweep_completion`), so the heuristics run as jobs, never in the API's threads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._jobs import Job, JobStatus

__all__ = ["Sweep", "SweepPoint", "new_sweep", "status_counts", "sweep_status"]


@dataclass(frozen=True)
class SweepPoint:
    """One (strategy, budget) of a sweep and the job that solves it."""

    strategy: str
    budget: int
    job_id: str


@dataclass(frozen=True)
class Sweep:
    """The stored record of a sweep; its status and results are read from its jobs."""

    id: str
    graph_sha256: str
    graph_name: str
    points: tuple[SweepPoint, ...]
    created_at: float
    token: str | None = None
    """Id of the token that owns it (see :attr:`remat.service.Job.token`)."""
    natural: Mapping[str, int] = field(default_factory=dict)
    """Each heuristic's own peak when unconstrained (budgets the sweep added for it)."""
    planned: bool = True
    """False until the natural points have been added (the heuristics' unconstrained runs have not all ended)."""

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "graph_sha256": self.graph_sha256, "graph_name": self.graph_name,
                "points": [[p.strategy, p.budget, p.job_id] for p in self.points],
                "created_at": self.created_at, "token": self.token, "natural": dict(self.natural),
                "planned": self.planned}

    @classmethod
    def from_record(cls, doc: Mapping[str, Any]) -> Sweep:
        return cls(doc["id"], doc["graph_sha256"], doc["graph_name"],
                   tuple(SweepPoint(s, b, j) for s, b, j in doc["points"]), doc["created_at"], doc["token"],
                   doc["natural"], doc.get("planned", True))

    @property
    def job_ids(self) -> list[str]:
        return [p.job_id for p in self.points]

    def status(self, statuses: Iterable[JobStatus]) -> JobStatus:
        """The sweep's status from its jobs' (see :func:`sweep_status`); running while it is not planned."""
        status = sweep_status(statuses)
        return JobStatus.RUNNING if status.terminal and not self.planned else status


def new_sweep(jobs: Sequence[Job], *, graph_name: str, token: str | None, now: float, planned: bool) -> Sweep:
    """A sweep over ``jobs`` (all of one graph, in the sweep's order); identical sweeps get the same id."""
    points = tuple(SweepPoint(j.spec.strategy, j.spec.budget, j.id) for j in jobs)
    graph = {j.spec.graph_sha256 for j in jobs}
    if len(graph) != 1:
        raise ValueError("a sweep covers exactly one graph")
    text = json.dumps(sorted(p.job_id for p in points))
    return Sweep(hashlib.sha256(text.encode()).hexdigest(), graph.pop(), graph_name, points, now, token,
                 planned=planned)


def status_counts(statuses: Iterable[JobStatus | str]) -> dict[str, int]:
    """How many of ``statuses`` are each job status, every status listed (0 when none is).

    >>> status_counts(["queued", JobStatus.QUEUED, "failed"])["queued"]
    2
    """
    counts = {s.value: 0 for s in JobStatus}
    for status in statuses:
        counts[JobStatus(status).value] += 1
    return counts


def sweep_status(statuses: Iterable[JobStatus]) -> JobStatus:
    """A sweep's status from its jobs': running until every job has ended, then how the best one ended.

    >>> sweep_status([JobStatus.SUCCEEDED, JobStatus.QUEUED])
    <JobStatus.RUNNING: 'running'>
    >>> sweep_status([JobStatus.FAILED, JobStatus.SUCCEEDED]).value
    'succeeded'
    """
    seen = set(statuses)
    if seen <= {JobStatus.QUEUED}:
        return JobStatus.QUEUED
    if not all(s.terminal for s in seen):
        return JobStatus.RUNNING
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        if status in seen:
            return status
    return JobStatus.CANCELLED
