"""The ``scip`` backend: SCIP through pyscipopt (single-threaded; ``threads`` is not used).

SCIP gets the model scaled (MilpModel.scaled): on the unscaled Checkmate model its LP solver stops
the root LP early and SCIP declares the MIP start optimal (fcn8 at ratio 0.8: "optimal" at 4.5 %
overhead where 0.136 % is). An event handler reports every new best solution and, about once a
second, the dual bound; it also interrupts the solve once a stop is requested, so SCIP returns its
incumbent.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from remat.schedules import BackendUnavailable

from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress

try:
    import pyscipopt
except ImportError as e:  # pragma: no cover - exercised only where pyscipopt is missing
    pyscipopt = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

__all__ = ["solve"]

_BOUND_EVERY_S = 1.0
"""Least seconds between two reports of the engine's bound. (docs/tuning.md)"""


def solve(model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with SCIP within ``limits``."""
    if pyscipopt is None:
        raise BackendUnavailable(f"The scip backend needs pyscipopt (pip install pyscipopt): {_IMPORT_ERROR}.")
    model, scales = model.scaled()
    m = pyscipopt.Model()
    m.setParam("limits/time", limits.remaining_s())
    m.setParam("limits/gap", limits.mip_gap)
    xs = [m.addVar(lb=_finite(lo), ub=_finite(hi), obj=float(c), vtype=_vtype(integer, lo, hi))
          for lo, hi, c, integer in zip(model.lower, model.upper, model.objective, model.integer, strict=True)]
    m.addObjoffset(model.objective_offset)
    for r in range(model.n_rows):
        idx, val = model.row(r)
        expr = pyscipopt.quicksum(float(v) * xs[j] for j, v in zip(idx, val, strict=True))
        lo, hi = model.row_lower[r], model.row_upper[r]
        if lo == hi:
            m.addCons(expr == float(lo))
            continue
        if math.isfinite(hi):
            m.addCons(expr <= float(hi))
        if math.isfinite(lo):
            m.addCons(expr >= float(lo))
    if model.start is not None and model.integer.any():
        start = m.createSol()
        for x, value in zip(xs, model.start, strict=True):
            m.setSolVal(start, x, float(value))
        m.addSol(start, free=True)
    m.includeEventhdlr(_Reporter(xs, model, limits, on_progress), "remat-progress",
                       "reports incumbents and bounds, stops on request")
    m.optimize()
    return _result(m, xs, model, scales)


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _vtype(integer: bool, lo: float, hi: float) -> str:
    if not integer:
        return "C"
    return "B" if lo >= 0 and hi <= 1 else "I"


class _Reporter(pyscipopt.Eventhdlr if pyscipopt is not None else object):  # type: ignore[misc]
    def __init__(self, xs: list[Any], model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> None:
        super().__init__()
        self.xs, self.milp, self.limits, self.on_progress = xs, model, limits, on_progress
        self.watch = model.watch if model.watch is not None else np.zeros(0, dtype=np.int64)
        self.started = time.monotonic()
        self.last_bound_at = 0.0

    def eventinit(self) -> None:
        for kind in (pyscipopt.SCIP_EVENTTYPE.BESTSOLFOUND, pyscipopt.SCIP_EVENTTYPE.NODESOLVED,
                     pyscipopt.SCIP_EVENTTYPE.PRESOLVEROUND, pyscipopt.SCIP_EVENTTYPE.LPSOLVED):
            self.model.catchEvent(kind, self)

    def eventexec(self, event: Any) -> None:
        m = self.model
        if self.limits.stop.is_set():
            m.interruptSolve()
            return
        now = time.monotonic()
        if event.getType() == pyscipopt.SCIP_EVENTTYPE.BESTSOLFOUND:
            sol = m.getBestSol()
            watched = np.array([m.getSolVal(sol, self.xs[j]) for j in self.watch])
            self.on_progress(SolverProgress(now - self.started, objective=m.getSolObjVal(sol),
                                            bound=_bound(m), watched=watched))
        elif now - self.last_bound_at >= _BOUND_EVERY_S:
            self.last_bound_at = now
            self.on_progress(SolverProgress(now - self.started, bound=_bound(m)))


def _bound(m: Any) -> float | None:
    try:
        bound = m.getDualbound()
    except Exception:  # the dual bound does not exist before the solving stage
        return None
    return float(bound) if math.isfinite(bound) and abs(bound) < 1e20 else None


def _result(m: Any, xs: list[Any], model: MilpModel, scales: np.ndarray) -> BackendResult:
    status = m.getStatus()
    log = [f"SCIP status {status}"]
    if status == "infeasible":
        return BackendResult(EngineStatus.INFEASIBLE, log=log)
    if m.getNSols() == 0:
        return BackendResult(EngineStatus.NO_SOLUTION, bound=_bound(m), log=log)
    sol = m.getBestSol()
    x = np.array([m.getSolVal(sol, v) for v in xs]) * scales
    kind = EngineStatus.OPTIMAL if status in ("optimal", "gaplimit") else EngineStatus.FEASIBLE
    return BackendResult(kind, x, m.getSolObjVal(sol), _bound(m), log=log)
