"""The ``highs`` backend: HiGHS through highspy (MIT), the best open-source engine for this MILP.

HiGHS gets the model as arrays, scaled (MilpModel.scaled: on fcn8 at ratio 0.8 that halves its
time to proof; benchmarks/milp.py measures the backends), the MIP start through ``setSolution``, incumbents
through its improving-solution callback and bound updates through its MIP logging callback; a stop
request interrupts it from its interrupt callbacks, and it returns the incumbent it has.
"""

from __future__ import annotations

import time

import numpy as np

from remat.schedules import BackendUnavailable

from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress

try:
    import highspy
except ImportError as e:  # pragma: no cover - exercised only where highspy is missing
    highspy = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

__all__ = ["solve"]


def solve(model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with HiGHS within ``limits``, reporting incumbents and bounds as they come."""
    if highspy is None:
        raise BackendUnavailable(f"The highs backend needs highspy (pip install highspy): {_IMPORT_ERROR}.")
    model, scales = model.scaled()
    h = highspy.Highs()
    h.passModel(_lp(model))
    for option, value in (("time_limit", limits.remaining_s()), ("mip_rel_gap", limits.mip_gap),
                          ("threads", max(1, limits.threads)), ("log_to_console", True)):
        h.setOptionValue(option, value)
    is_mip = bool(model.integer.any())
    if is_mip and model.start is not None:
        start = highspy.HighsSolution()
        start.col_value = model.start.tolist()
        start.value_valid = True
        h.setSolution(start)

    started = time.monotonic()
    watch = model.watch if model.watch is not None else np.zeros(0, dtype=np.int64)

    def improving(event: highspy.highs.HighsCallbackEvent) -> None:
        out = event.data_out
        x = np.asarray(out.mip_solution)
        on_progress(SolverProgress(time.monotonic() - started, objective=out.objective_function_value,
                                   bound=out.mip_dual_bound, watched=x[watch]))

    def logging(event: highspy.highs.HighsCallbackEvent) -> None:
        out = event.data_out
        primal = out.mip_primal_bound if np.isfinite(out.mip_primal_bound) else None
        on_progress(SolverProgress(time.monotonic() - started, objective=primal, bound=out.mip_dual_bound))

    def interrupt(event: highspy.highs.HighsCallbackEvent) -> None:
        if limits.stop.is_set():
            event.interrupt()

    h.cbMipImprovingSolution.subscribe(improving)
    h.cbMipLogging.subscribe(logging)
    for point in (h.cbMipInterrupt, h.cbSimplexInterrupt, h.cbIpmInterrupt):
        point.subscribe(interrupt)
    h.run()
    return _result(h, is_mip, scales)


def _lp(model: MilpModel) -> highspy.HighsLp:
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = model.n_vars
    lp.num_row_ = model.n_rows
    lp.offset_ = model.objective_offset
    lp.col_cost_ = model.objective
    lp.col_lower_ = np.clip(model.lower, -inf, inf)
    lp.col_upper_ = np.clip(model.upper, -inf, inf)
    lp.row_lower_ = np.clip(model.row_lower, -inf, inf)
    lp.row_upper_ = np.clip(model.row_upper, -inf, inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = model.n_vars
    lp.a_matrix_.num_row_ = model.n_rows
    lp.a_matrix_.start_ = model.row_start.astype(np.int32)
    lp.a_matrix_.index_ = model.row_index.astype(np.int32)
    lp.a_matrix_.value_ = model.row_value
    if model.integer.any():
        kinds = (highspy.HighsVarType.kContinuous, highspy.HighsVarType.kInteger)
        lp.integrality_ = [kinds[int(flag)] for flag in model.integer]
    return lp


def _result(h: highspy.Highs, is_mip: bool, scales: np.ndarray) -> BackendResult:
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2
    x = np.asarray(h.getSolution().col_value) * scales if has_solution else None
    objective = info.objective_function_value if has_solution else None
    kinds = highspy.HighsModelStatus
    if status == kinds.kOptimal:
        bound = info.mip_dual_bound if is_mip else objective
        return BackendResult(EngineStatus.OPTIMAL, x, objective, bound)
    if status in (kinds.kInfeasible, kinds.kUnboundedOrInfeasible):
        return BackendResult(EngineStatus.INFEASIBLE)
    if not is_mip or x is None:
        return BackendResult(EngineStatus.NO_SOLUTION, bound=info.mip_dual_bound if is_mip else None,
                             log=[f"HiGHS stopped: {h.modelStatusToString(status)}"])
    return BackendResult(EngineStatus.FEASIBLE, x, objective, info.mip_dual_bound,
                         log=[f"HiGHS stopped: {h.modelStatusToString(status)}"])
