"""Jobs: the canonical request that names a job, the job record, and the transitions between states.

A request's key is the sha256 of its canonical form; a job belongs to one token, and its id is the
hash of the key and the token, so one token's identical requests share one job and no two tokens
ever share one (an identical request of another token may be answered by a copy of a reusable
result, see :func:`answer`). The record changes only through the transitions below: each is a pure
function from the stored record to the next one, or None when it does not apply, and a store
applies it atomically::

    queued --claim--> running --finish--> succeeded | failed | cancelled
      ^  \\                |  \\--lose, attempts left--> queued
      |   \\--cancel-->    |   \\-lose, none left-----> failed
      |     cancelled      \\--release (shutdown, attempt not counted)--> queued
      \\--rerun-- failed | cancelled | succeeded whose result is not reusable

A runner's writes carry its :class:`Claim` (owner and attempt number), so a runner that lost its
job to the reaper can no longer change it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from functools import cache
from importlib import metadata
from typing import Any

from remat.schedules import Transfer, UnknownStrategy
from remat.solvers import (
    DEFAULT_MIP_GAP,
    DEFAULT_TIME_LIMIT_S,
    Convergence,
    ResultDocument,
    ResultStatus,
    StrategyKind,
    get_strategy,
)

__all__ = [
    "Claim",
    "Job",
    "JobStatus",
    "SolveSpec",
    "answer",
    "claim",
    "fail",
    "finish",
    "job_id",
    "lose",
    "lost_reason",
    "needs_run",
    "new_job",
    "owner_here",
    "owner_name",
    "remat_version",
    "release",
    "renew",
    "request_cancel",
    "rerun",
    "reusable",
]

JOB_FORMAT = "remat.job/v1"
_PROVED = {ResultStatus.OPTIMAL.value, ResultStatus.INFEASIBLE.value}
_OPTIONAL_FIELDS = ("transfer", "host_budget", "convergence")
_UNFINISHED_RESULTS = {ResultStatus.TIMEOUT.value, ResultStatus.CANCELLED.value, ResultStatus.ERROR.value}


class JobStatus(StrEnum):
    """Where a job is in its life; the values are the wire strings of docs/api.md."""

    QUEUED = "queued"
    """Waiting for a free slot or worker."""
    RUNNING = "running"
    """A solver process is working on it."""
    SUCCEEDED = "succeeded"
    """The solve ended and its remat.result/v1 is stored (its own status says how it ended)."""
    FAILED = "failed"
    """The solve could not finish: ``error`` says why."""
    CANCELLED = "cancelled"
    """Stopped on request; the best plan found before the stop, if any, is the result."""

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)

    @classmethod
    def ended_with(cls, result_status: str) -> JobStatus:
        """The status of a job whose solve returned a result of ``result_status``.

        >>> JobStatus.ended_with("error"), JobStatus.ended_with("timeout")
        (<JobStatus.FAILED: 'failed'>, <JobStatus.SUCCEEDED: 'succeeded'>)
        """
        ends = {ResultStatus.ERROR: JobStatus.FAILED, ResultStatus.CANCELLED: JobStatus.CANCELLED}
        return ends.get(ResultStatus(result_status), JobStatus.SUCCEEDED)


@cache
def remat_version() -> str:
    """The installed remat's version; part of every job id, so a new release solves afresh."""
    try:
        return metadata.version("remat")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class SolveSpec:
    """Everything that determines a solve's answer; its hash is the request's key."""

    graph_sha256: str
    budget: int
    strategy: str
    backend: str = "auto"
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    mip_gap: float = DEFAULT_MIP_GAP
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The strategy's own options (:func:`remat.solvers.solve`'s ``options``)."""
    transfer: Mapping[str, float] | None = field(default=None, hash=False)
    """Copy times to host memory and back, in the graph's units (:meth:`remat.schedules.Transfer.to_json`)."""
    host_budget: int | None = None
    """Bytes the plan's host copies may hold at most."""
    convergence: Mapping[str, float] | None = field(default=None, hash=False)
    """The rule that stops the solve before its time limit (:meth:`remat.solvers.Convergence.to_json`);
    None runs it to the limit."""

    @property
    def key(self) -> str:
        """The sha256 of the canonical request: equal for identical requests, of any token.

        The offload parameters and the convergence rule count only when given, so a request without
        them keeps the key it had before they existed.
        """
        doc = {k: v for k, v in asdict(self).items() if not (k in _OPTIONAL_FIELDS and v is None)}
        canon = {"format": JOB_FORMAT, "remat": remat_version(), **doc,
                 "time_limit_s": float(self.time_limit_s), "mip_gap": float(self.mip_gap)}
        text = json.dumps(canon, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def transfer_params(self) -> Transfer | None:
        """The request's transfer parameters as :func:`remat.solvers.solve` takes them."""
        return None if self.transfer is None else Transfer.from_json(self.transfer)

    @property
    def convergence_rule(self) -> Convergence | None:
        """The request's convergence rule as :func:`remat.solvers.solve` takes it."""
        return None if self.convergence is None else Convergence(**self.convergence)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SolveSpec:
        return cls(**doc)


@dataclass(frozen=True)
class Claim:
    """A runner's hold on a job: only the owner of this attempt may renew or finish it."""

    job_id: str
    owner: str
    attempt: int


@dataclass(frozen=True)
class Job:
    """The stored record of one job. ``result`` is loaded only when asked for."""

    id: str
    spec: SolveSpec
    status: JobStatus
    graph_name: str = ""
    token: str | None = None
    """Id of the token that owns it (a hash, never the token; None when authentication is off): only that
    token sees it, and it counts against that token's limits."""
    attempts: int = 0
    owner: str | None = None
    solver_pid: int | None = None
    lease_until: float | None = None
    cancel_requested: bool = False
    progress: Mapping[str, Any] | None = None
    result_status: str | None = None
    error: str | None = None
    created_at: float = 0.0
    queued_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    history: tuple[str, ...] = ()
    """What happened to earlier attempts (lost runners, restarts), oldest first."""
    result: ResultDocument | None = field(default=None, compare=False)

    def to_record(self) -> dict[str, Any]:
        """The JSON record a store keeps (everything but the result)."""
        doc = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "result"}
        doc.update(spec=asdict(self.spec), status=self.status.value, history=list(self.history),
                   progress=dict(self.progress) if self.progress is not None else None)
        return doc

    @classmethod
    def from_record(cls, doc: Mapping[str, Any], result: Mapping[str, Any] | None = None) -> Job:
        """The job of a stored record and, when loaded with it, its stored remat.result/v1 (parsed here)."""
        return cls(**{**doc, "spec": SolveSpec.from_json(doc["spec"]), "status": JobStatus(doc["status"]),
                      "history": tuple(doc.get("history", ())),
                      "result": None if result is None else ResultDocument.from_json(result)})


def job_id(spec: SolveSpec, token: str | None) -> str:
    """The id of ``token``'s job for ``spec``: the request's key without authentication, else a hash of both."""
    if token is None:
        return spec.key
    return hashlib.sha256(f"{spec.key}:{token}".encode()).hexdigest()


def new_job(spec: SolveSpec, *, graph_name: str, token: str | None, now: float) -> Job:
    return Job(job_id(spec, token), spec, JobStatus.QUEUED, graph_name=graph_name, token=token, created_at=now,
               queued_at=now)


def answer(job: Job, result: ResultDocument, *, now: float) -> Job:
    """A new job answered at once by the reusable ``result`` of an identical request (it never runs)."""
    return replace(job, status=JobStatus.SUCCEEDED, result_status=result.status.value, started_at=now,
                   finished_at=now)


def reusable(job: Job) -> bool:
    """True when a finished job's result answers an identical request for good.

    Proofs (optimal, infeasible) always do; so does any finished result of a baseline, since every
    baseline is deterministic. A time-limited MILP incumbent does not.
    """
    if job.status is not JobStatus.SUCCEEDED or job.result_status in _UNFINISHED_RESULTS:
        return False
    if job.result_status in _PROVED:
        return True
    try:
        return get_strategy(job.spec.strategy).kind is StrategyKind.BASELINE
    except UnknownStrategy:
        return False


def needs_run(job: Job | None) -> bool:
    """True unless the job exists and is queued, running, or finished with a result that can be reused."""
    return job is None or (job.status.terminal and not reusable(job))


# -- transitions: each returns the next record, or None when it does not apply ---------------------


def rerun(job: Job, fresh: Job) -> Job | None:
    """An ended job whose result cannot be reused is replaced by ``fresh`` (a new run of the same request)."""
    return fresh if needs_run(job) else None


def claim(job: Job, *, owner: str, now: float, lease_s: float) -> Job | None:
    if job.status is not JobStatus.QUEUED:
        return None
    return replace(job, status=JobStatus.RUNNING, attempts=job.attempts + 1, owner=owner, solver_pid=None,
                   lease_until=now + lease_s, started_at=now, progress=None, error=None)


def _held(job: Job, by: Claim) -> bool:
    return job.status is JobStatus.RUNNING and job.owner == by.owner and job.attempts == by.attempt


def renew(job: Job, by: Claim, *, now: float, lease_s: float, progress: Mapping[str, Any] | None = None,
          solver_pid: int | None = None) -> Job | None:
    if not _held(job, by):
        return None
    return replace(job, lease_until=now + lease_s, progress=progress if progress is not None else job.progress,
                   solver_pid=solver_pid if solver_pid is not None else job.solver_pid)


def finish(job: Job, by: Claim, *, now: float, result: ResultDocument) -> Job | None:
    """The solve returned a remat.result/v1; the job's status follows the result's."""
    if not _held(job, by):
        return None
    status = JobStatus.ended_with(result.status)
    error = ("; ".join(result.log[-3:]) or "the solver failed") if status is JobStatus.FAILED else None
    return replace(job, status=status, result_status=result.status.value, error=error, finished_at=now,
                   lease_until=None)


def fail(job: Job, by: Claim, *, now: float, error: str, cancelled: bool = False) -> Job | None:
    """The solve ended without a result: it crashed, was killed, or was cancelled before any plan."""
    if not _held(job, by):
        return None
    return replace(job, status=JobStatus.CANCELLED if cancelled else JobStatus.FAILED, error=error,
                   finished_at=now, lease_until=None)


def request_cancel(job: Job, *, now: float) -> Job | None:
    if job.status is JobStatus.QUEUED:
        return replace(job, status=JobStatus.CANCELLED, cancel_requested=True, finished_at=now,
                       error="cancelled before it started")
    if job.status is JobStatus.RUNNING and not job.cancel_requested:
        return replace(job, cancel_requested=True)
    return None


STALLED_LEASES = 4
"""Leases a runner alive on this host may miss (a loaded machine) before its job is taken back. (docs/tuning.md)"""


def lost_reason(job: Job, *, now: float, lease_s: float) -> str | None:
    """Why a running job has no live runner any more, or None while it has one.

    An owner on this host whose process is gone has lost it at once; elsewhere, an owner has lost it
    when its lease ran out; an owner alive on this host only after STALLED_LEASES more leases.
    """
    if job.status is not JobStatus.RUNNING:
        return None
    here = owner_here(job.owner or "")
    if here is False:
        return f"the process running it ({job.owner}) exited"
    overdue = now - job.lease_until if job.lease_until is not None else 0.0
    if overdue > (STALLED_LEASES * lease_s if here else 0.0):
        return f"the process running it ({job.owner}) stopped renewing its lease"
    return None


def lose(job: Job, *, now: float, lease_s: float, max_attempts: int) -> Job | None:
    """The job has no live runner: queue it again, or fail it when no attempt is left."""
    reason = lost_reason(job, now=now, lease_s=lease_s)
    if reason is None:
        return None
    if job.cancel_requested:
        return replace(job, status=JobStatus.CANCELLED, finished_at=now, lease_until=None,
                       error=f"cancelled; {reason}")
    if job.attempts >= max_attempts:
        return replace(job, status=JobStatus.FAILED, finished_at=now, lease_until=None,
                       error=f"{reason} (attempt {job.attempts} of {max_attempts}); giving up")
    note = f"attempt {job.attempts}: {reason}; queued again"
    return replace(job, status=JobStatus.QUEUED, owner=None, solver_pid=None, lease_until=None, queued_at=now,
                   history=(*job.history, note))


def release(job: Job, by: Claim, *, now: float) -> Job | None:
    """The runner is shutting down: put the job back in the queue without counting the attempt."""
    if not _held(job, by):
        return None
    note = f"attempt {job.attempts}: the service shut down while it ran; queued again (not counted)"
    return replace(job, status=JobStatus.QUEUED, attempts=job.attempts - 1, owner=None, solver_pid=None,
                   lease_until=None, queued_at=now, history=(*job.history, note))


# -- owners -----------------------------------------------------------------------------------------


def owner_name(slot: str) -> str:
    """``host:pid:start:slot``: who runs a job, precise enough to tell on this host whether it is alive.

    ``start`` is when the process started (from /proc; empty where the system cannot tell), so a
    process that reuses the pid of a dead owner (a container restarted on the same host) is not it.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{_started(os.getpid()) or ''}:{slot}"


def owner_here(owner: str) -> bool | None:
    """Whether the owner's process is alive, when it is a process of this host; None for another host."""
    host, _, rest = owner.partition(":")
    pid_text, _, rest = rest.partition(":")
    started = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started.isdigit() and _started(pid) not in (None, started):
        return False  # the pid now belongs to another process
    return True


def _started(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (/proc/PID/stat, field 22); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None
