"""Sweeps: one graph solved by many strategies over many budgets, each point an ordinary job."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._jobs import JobStatus, SolveSpec

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
    natural: Mapping[str, int] = field(default_factory=dict)
    """Each heuristic's own peak when unconstrained (budgets the sweep added for it)."""

    def to_record(self) -> dict[str, Any]:
        return {"id": self.id, "graph_sha256": self.graph_sha256, "graph_name": self.graph_name,
                "points": [[p.strategy, p.budget, p.job_id] for p in self.points],
                "created_at": self.created_at, "token": self.token, "natural": dict(self.natural)}

    @classmethod
    def from_record(cls, doc: Mapping[str, Any]) -> Sweep:
        return cls(doc["id"], doc["graph_sha256"], doc["graph_name"],
                   tuple(SweepPoint(s, b, j) for s, b, j in doc["points"]), doc["created_at"], doc["token"],
                   doc["natural"])

    @property
    def job_ids(self) -> list[str]:
        return [p.job_id for p in self.points]


def new_sweep(specs: Iterable[SolveSpec], *, graph_name: str, token: str | None, now: float,
              natural: Mapping[str, int]) -> Sweep:
    """A sweep over ``specs`` (all of one graph); identical sweeps get the same id."""
    specs = tuple(specs)
    points = tuple(SweepPoint(s.strategy, s.budget, s.job_id) for s in specs)
    graph = {s.graph_sha256 for s in specs}
    if len(graph) != 1:
        raise ValueError("a sweep covers exactly one graph")
    text = json.dumps(sorted(p.job_id for p in points))
    return Sweep(hashlib.sha256(text.encode()).hexdigest(), graph.pop(), graph_name, points, now, token, natural)


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
