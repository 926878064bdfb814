"""A default sweep's second step: every strategy at each heuristic's natural budget (see :mod:`._sweeps`).

The executors' maintenance (every API replica, every worker) calls :func:`complete_sweeps`. A sweep
is completed once each heuristic's run at the sweep's top budget (the checkpoint-all peak, where
nothing constrains it) has ended: the peak of its plan is that heuristic's natural budget. Completing
only submits jobs and rewrites the sweep's record, both idempotent, so two processes doing it at
once agree. The natural points count against the token's ``max_active_jobs_per_token`` like any job
it starts: they are added once they fit beside its queued and running jobs and the slots its
max-batch searches hold (:mod:`._token_load`); until then the sweep waits. Admission made sure
they fit the cap (it counted them when the sweep was submitted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from remat.solvers import StrategyKind, get_strategy

from ._jobs import Job
from ._store import JobStore
from ._sweeps import Sweep, SweepPoint
from ._token_load import token_load

__all__ = ["complete_sweeps", "natural_sources"]

log = logging.getLogger("remat.service")


def natural_sources(sweep: Sweep) -> dict[str, str]:
    """Each heuristic's job at the sweep's top budget, by strategy: the runs that give the natural budgets."""
    top = max(p.budget for p in sweep.points)
    return {p.strategy: p.job_id for p in sweep.points
            if p.budget == top and get_strategy(p.strategy).kind is StrategyKind.BASELINE}


def complete_sweeps(store: JobStore, dispatch: Callable[[Job], None], *, max_active_jobs_per_token: int) -> list[Sweep]:
    """Add the natural points of every sweep whose sources have ended and whose token has room for them; returns
    the sweeps completed."""
    completed = []
    for sweep in store.unplanned_sweeps():
        planned = _complete(store, sweep, dispatch, max_active_jobs_per_token)
        if planned is not None:
            log.info("sweep %s: %d natural points added", sweep.id, len(planned.points) - len(sweep.points))
            completed.append(planned)
    return completed


def _complete(store: JobStore, sweep: Sweep, dispatch: Callable[[Job], None], cap: int) -> Sweep | None:
    jobs = {j.id: j for j in store.get_many(sweep.job_ids)}
    sources = natural_sources(sweep)
    if any(job_id in jobs and not jobs[job_id].status.terminal for job_id in sources.values()):
        return None
    summaries = store.result_summaries([job_id for job_id in sources.values() if job_id in jobs])
    peaks = {j: summary.peak_memory for j, summary in summaries.items()}
    natural = {s: peak for s, j in sources.items() if (peak := peaks.get(j)) is not None}
    budgets = sorted(set(natural.values()) - {p.budget for p in sweep.points})
    specs = {p.strategy: jobs[p.job_id].spec for p in sweep.points if p.job_id in jobs}
    if specs and budgets and token_load(store, sweep.token).slots + len(specs) * len(budgets) > cap:
        return None  # the token's jobs fill its cap: the natural points wait for room
    added = []
    for strategy, spec in specs.items():
        for budget in budgets:
            job, fresh = store.submit(replace(spec, budget=budget), graph_name=sweep.graph_name, token=sweep.token)
            if fresh:
                dispatch(job)
            added.append(SweepPoint(strategy, budget, job.id))
    order = {s: i for i, s in enumerate(dict.fromkeys(p.strategy for p in sweep.points))}
    points = tuple(sorted((*sweep.points, *added), key=lambda p: (order[p.strategy], p.budget)))
    planned = replace(sweep, points=points, natural=natural, planned=True)
    store.replace_sweep(planned)
    return planned
