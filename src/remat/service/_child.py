"""One solve in its own process group: the child's entry point, and what it sends its runner.

The runner starts the child with :func:`~remat.solvers.spawn`, forked from a forkserver
that has imported remat.solvers once (the API process has threads, so it must not fork itself),
which makes starting a solve cheap. The child validates the job's graph, runs
:func:`remat.solvers.solve`, and sends its :class:`~remat.solvers.Progress` reports, then
:class:`Solved` or :class:`JobError` (a :class:`~remat.solvers.ChildFailed` for an unexpected
error, whose traceback is for the server's log only). A stop request from the runner becomes the
solve's stop with that reason (even while the main thread is inside a solver's C code), so the
strategy returns its best plan so far and the result's status says why it stopped. When the runner
disappears the child kills its own group at once (see :mod:`remat.solvers._children`); the engines
and helpers the solve started follow when their parent ends.
"""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext
from typing import Any

from remat.schedules import Graph, RematError
from remat.solvers import Child, Parent, ResultDocument, solve, spawn

from ._jobs import SolveSpec

__all__ = ["JobError", "SolveJob", "Solved", "solver_context", "start_solve"]


@dataclass(frozen=True)
class SolveJob:
    """The child's request: the job's spec and graph document, and the server's threads and result cap."""

    spec: SolveSpec
    graph_doc: dict[str, Any]
    threads: int
    max_result_bytes: int


@dataclass(frozen=True)
class Solved:
    """The solve's result document (remat.result/v1)."""

    result: ResultDocument


@dataclass(frozen=True)
class JobError:
    """A sentence for the job's caller saying why the solve failed."""

    error: str


def solver_context() -> ForkServerContext:
    """The context solver children come from: a forkserver, started now, that has imported the solvers."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload([__name__])
    forkserver.ensure_running()
    return ctx


def start_solve(spec: SolveSpec, graph_doc: dict[str, Any], *, threads: int, max_result_bytes: int,
                ctx: ForkServerContext) -> Child:
    """Start the child that solves ``spec``, in a process group of its own, killed at once if its runner goes."""
    return spawn(_solve_job, SolveJob(spec, graph_doc, threads, max_result_bytes), own_group=True, grace_s=0,
                 forkserver=ctx, name=f"remat-solve-{spec.key[:12]}")


def _solve_job(parent: Parent, job: SolveJob) -> None:
    spec = job.spec
    try:
        result = solve(Graph.from_json(job.graph_doc), budget=spec.budget, strategy=spec.strategy,
                       backend=spec.backend, time_limit_s=spec.time_limit_s, mip_gap=spec.mip_gap,
                       options=spec.options, transfer=spec.transfer_params, host_budget=spec.host_budget,
                       convergence=spec.convergence_rule, threads=job.threads, on_progress=parent.send,
                       stop_event=parent.stop)
    except RematError as e:
        parent.send(JobError(f"{type(e).__name__}: {e}"))
        return
    parent.send(_result_message(result.document(), job.max_result_bytes))


def _result_message(result: ResultDocument, max_bytes: int) -> Solved | JobError:
    """The result, or an error saying why a result over ``max_bytes`` of JSON cannot be stored."""
    size = len(json.dumps(result.to_json()))
    if size <= max_bytes:
        return Solved(result)
    steps = len(result.plan or ())
    return JobError(f"The result is {size} bytes of JSON (a plan of {steps} steps), over this server's limit of "
                    f"{max_bytes} (REMAT_MAX_RESULT_BYTES); solve this graph in-process with `remat solve`, or "
                    f"choose a strategy that recomputes less.")
