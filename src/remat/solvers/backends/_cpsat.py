"""The ``cpsat`` backend: OR-Tools CP-SAT on the MILP, which must be integral.

CP-SAT works on integers only. Continuous variables are accepted when their bounds are integral
(the Checkmate model's memory variables are: sizes are whole memory units), and every row must
have integral coefficients and bounds. The objective's coefficients are rounded down onto an integer
grid (``unit``: the smallest coefficient when all are multiples of it, else 1/2**20 of the largest),
and its constant is left out, so the bound CP-SAT proves, times ``unit``, plus the constant, is still
a valid lower bound; the requested gap is passed as an absolute gap on that scale as well (see
MilpModel.absolute_gap). Incumbents are re-evaluated with the exact objective. CP-SAT cannot solve an LP.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from remat.schedules import BackendUnavailable

from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress, on_stop

try:
    from ortools.sat.python import cp_model
except ImportError as e:  # pragma: no cover - exercised only where ortools is missing
    cp_model = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

__all__ = ["solve"]

OBJECTIVE_STEPS = 2**20
"""Integer steps the largest objective coefficient is divided into. (docs/tuning.md)"""

_INT_LIMIT = 2**53


def solve(model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with CP-SAT within ``limits`` (``threads`` is its number of workers)."""
    if cp_model is None:
        raise BackendUnavailable(f"The cpsat backend needs ortools (pip install ortools): {_IMPORT_ERROR}.")
    _check_integral(model)
    cp = cp_model.CpModel()
    xs = [cp.new_int_var(int(lo), int(hi), f"x{j}")
          for j, (lo, hi) in enumerate(zip(model.lower, model.upper, strict=True))]
    for r in range(model.n_rows):
        idx, val = model.row(r)
        lo, hi = model.row_lower[r], model.row_upper[r]
        expr = cp_model.LinearExpr.weighted_sum([xs[j] for j in idx], [int(v) for v in val])
        cp.add_linear_constraint(expr, int(max(lo, -_INT_LIMIT)), int(min(hi, _INT_LIMIT)))
    unit = _objective_unit(model.objective)
    weights = np.floor(model.objective / unit + 1e-9).astype(np.int64)
    terms = [(xs[j], int(w)) for j, w in enumerate(weights) if w]
    cp.minimize(cp_model.LinearExpr.weighted_sum([x for x, _ in terms], [w for _, w in terms]))
    if model.start is not None:
        for x, value in zip(xs, model.start, strict=True):
            cp.add_hint(x, int(round(value)))

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limits.remaining_s()
    solver.parameters.num_workers = max(1, limits.threads)
    solver.parameters.relative_gap_limit = limits.mip_gap
    absolute_gap = model.absolute_gap(limits.mip_gap)
    if absolute_gap is not None:
        solver.parameters.absolute_gap_limit = absolute_gap / unit
    solver.parameters.log_search_progress = True
    started = time.monotonic()
    watch = model.watch if model.watch is not None else np.zeros(0, dtype=np.int64)

    class Incumbents(cp_model.CpSolverSolutionCallback):  # type: ignore[misc]
        def on_solution_callback(self) -> None:
            x = np.array([self.value(v) for v in xs], dtype=np.float64)
            on_progress(SolverProgress(time.monotonic() - started, objective=model.objective_value(x),
                                       bound=to_model(self.best_objective_bound), watched=x[watch]))

    def to_model(bound: float) -> float:
        return bound * unit + model.objective_offset

    solver.best_bound_callback = lambda bound: on_progress(SolverProgress(time.monotonic() - started,
                                                                          bound=to_model(bound)))
    with on_stop(limits, solver.stop_search):
        status = solver.solve(cp, Incumbents())
    return _result(solver, status, xs, model, to_model)


def _objective_unit(objective: np.ndarray) -> float:
    """The step of the integer objective: the smallest coefficient when all are multiples of it, else a fine grid."""
    magnitudes = np.abs(objective[objective != 0])
    if not magnitudes.size:
        return 1.0
    smallest = float(magnitudes.min())
    ratios = magnitudes / smallest
    if float(ratios.max()) <= OBJECTIVE_STEPS and np.allclose(ratios, np.round(ratios), rtol=0, atol=1e-9):
        return smallest
    return float(magnitudes.max()) / OBJECTIVE_STEPS


def _check_integral(model: MilpModel) -> None:
    def integral(a: np.ndarray) -> bool:
        finite = a[np.isfinite(a)]
        return bool(np.all(finite == np.round(finite)))

    if model.relaxation:
        raise BackendUnavailable("The cpsat backend cannot solve an LP relaxation; use highs, cbc, scip or gurobi.")
    if not (integral(model.row_value) and integral(model.row_lower) and integral(model.row_upper)
            and integral(model.lower) and integral(model.upper)):
        raise BackendUnavailable("The cpsat backend needs a model whose rows and bounds are all integral.")


def _result(solver: cp_model.CpSolver, status: cp_model.CpSolverStatus, xs: list[cp_model.IntVar], model: MilpModel,
            to_model: Callable[[float], float]) -> BackendResult:
    log = [f"CP-SAT status {solver.status_name(status)}"]
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        x = np.array([solver.value(v) for v in xs], dtype=np.float64)
        bound = to_model(solver.best_objective_bound)
        kind = EngineStatus.OPTIMAL if status == cp_model.OPTIMAL else EngineStatus.FEASIBLE
        return BackendResult(kind, x, model.objective_value(x), bound, log=log)
    if status == cp_model.INFEASIBLE:
        return BackendResult(EngineStatus.INFEASIBLE, log=log)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT rejected the model: {solver.response_stats()}")
    return BackendResult(EngineStatus.NO_SOLUTION, log=log)
