"""Run a backend in its own solver process, stream its progress, stop it, kill it if it hangs.

The engine runs in a child of :func:`~remat.solvers._children.spawn` that leads its own process
group (so CBC's subprocess goes with it): the parent sends an :class:`EngineRun` and receives the
engine's :class:`SolverProgress` reports and its :class:`BackendResult` (or a
:class:`~remat.solvers._children.ChildFailed`); engine logs are kept as a tail. To stop, the parent
first sends a stop request, which the child turns into the engine's own interrupt (the engine keeps
its incumbent and returns), and kills the whole process group if no result comes within
:data:`~remat.solvers._supervise.GRACE_S` (a :class:`~remat.solvers._supervise.StopThenKill`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from remat.schedules import BackendUnavailable, SolverFailed

from .._children import Child, ChildFailed, Parent, spawn
from .._supervise import StopThenKill
from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress
from ._table import Backend, get_backend

__all__ = ["EngineRun", "run_backend"]

POLL_S = 0.05
"""Seconds between two looks at the stop flag and the deadline while waiting for the engine."""


@dataclass(frozen=True)
class EngineRun:
    """The request of a solver process: which backend solves which model within which limits."""

    backend: str
    model: MilpModel
    limits: dict[str, float | int]


def run_backend(backend: Backend, model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with ``backend`` in a fresh solver process.

    ``limits.stop`` (set by another thread, e.g. on cancel) and ``limits.time_limit_s`` end the
    run; either way the result carries the best solution the engine reported. Incumbents are
    passed to ``on_progress`` as they arrive, so even a killed engine's last incumbent is kept:
    the returned result then has status FEASIBLE, ``x`` None and ``watched`` set.
    """
    child = spawn(_run_engine, EngineRun(backend.name, model, limits.picklable()), own_group=True, output_lines=40)
    try:
        return _supervise(backend, model, child, limits, on_progress)
    finally:
        child.close()


def _supervise(backend: Backend, model: MilpModel, child: Child, limits: Limits,
               on_progress: ProgressCallback) -> BackendResult:
    stopper = StopThenKill.within(limits.time_limit_s, lambda _: child.stop(), child.kill)
    best: SolverProgress | None = None
    bound: float | None = None
    while child.alive():
        for message in child.receive(POLL_S):
            match message:
                case SolverProgress():
                    if message.bound is not None and np.isfinite(message.bound):
                        bound = message.bound if bound is None else max(bound, message.bound)
                    if message.watched is not None and (best is None or _objective(message) <= _objective(best)):
                        best = message
                    on_progress(message)
                case BackendResult():
                    if message.x is not None and model.watch is not None:
                        message.watched = message.x[model.watch]
                    message.log[:0] = list(child.tail)
                    return message
                case ChildFailed(name="BackendUnavailable"):
                    raise BackendUnavailable(message.text)
                case ChildFailed():
                    raise SolverFailed(f"The {backend.name} backend failed: {message.text}")
        if limits.stop.is_set():
            stopper.stop()
        if stopper.tend():
            killed = [*child.tail, f"{backend.name} killed after a stop request"]
            return _without_result(backend, child, best, bound, killed)
    return _without_result(backend, child, best, bound, child.tail)


def _objective(progress: SolverProgress) -> float:
    return np.inf if progress.objective is None else progress.objective


def _without_result(backend: Backend, child: Child, best: SolverProgress | None, bound: float | None,
                    tail: Iterable[str]) -> BackendResult:
    """What is left when the process ended before sending a result: its last incumbent, if any."""
    log = list(tail)
    if best is None:
        code = child.exitcode
        if code in (None, -signal.SIGKILL):
            return BackendResult(EngineStatus.NO_SOLUTION, bound=bound, log=log)
        if not child.started:
            raise SolverFailed(f"The {backend.name} solver process ended at start: {' | '.join(log)}")
        raise SolverFailed(f"The {backend.name} solver process exited with code {code}: {' | '.join(log[-5:])}")
    return BackendResult(EngineStatus.FEASIBLE, objective=best.objective, bound=bound, watched=best.watched, log=log)


def _run_engine(parent: Parent, run: EngineRun) -> None:
    """In the solver process: run the engine, sending its progress and its result; a stop request interrupts it."""
    limits = Limits(**run.limits, stop=parent.stop)  # type: ignore[arg-type]
    parent.send(get_backend(run.backend).solve(run.model, limits, parent.send))
