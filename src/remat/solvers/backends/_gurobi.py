"""The ``gurobi`` backend: Gurobi through gurobipy, for users with a Gurobi licence.

The pip package ships a size-limited evaluation licence (at most 2,000 variables and 2,000
linear constraints; larger models fail with error 10010). :func:`licence_size_limit` probes for
it, and :func:`solve` refuses a model over the limit before building it, with a message that
says so. A callback reports incumbents and bounds and terminates the solve on a stop request.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from remat.schedules import BackendUnavailable

from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress, on_stop

try:
    import gurobipy as gp
    from gurobipy import GRB
except ImportError as e:  # pragma: no cover - exercised only where gurobipy is missing
    gp = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

__all__ = ["PIP_LICENCE_LIMIT", "licence_size_limit", "solve"]

PIP_LICENCE_LIMIT = 2000
"""Variables, and linear constraints, the pip package's restricted licence allows."""

_SIZE_LIMIT_ERROR = 10010
_BOUND_EVERY_S = 1.0
"""Least seconds between two reports of the engine's bound. (docs/tuning.md)"""


def licence_size_limit() -> int | None:
    """PIP_LICENCE_LIMIT when only the restricted licence is present, None with a full licence."""
    _require()
    try:
        with gp.Env(params={"OutputFlag": 0}) as env, gp.Model(env=env) as m:
            m.addVars(PIP_LICENCE_LIMIT + 1)
            m.optimize()
    except gp.GurobiError as e:
        if e.errno == _SIZE_LIMIT_ERROR:
            return PIP_LICENCE_LIMIT
        raise BackendUnavailable(f"Gurobi cannot start: {e}.") from None
    return None


def solve(model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with Gurobi within ``limits``; BackendUnavailable if its licence cannot take it."""
    _require()
    if max(model.n_vars, model.n_rows) > PIP_LICENCE_LIMIT and licence_size_limit() is not None:
        raise BackendUnavailable(
            f"The gurobi backend has only the pip package's size-limited licence (at most {PIP_LICENCE_LIMIT:,} "
            f"variables and {PIP_LICENCE_LIMIT:,} constraints); this model has {model.n_vars:,} variables and "
            f"{model.n_rows:,} constraints. Install a full Gurobi licence or use another backend (highs).")
    env = gp.Env(params={"OutputFlag": 1, "LogToConsole": 1})
    m = gp.Model(env=env)
    vtypes = np.array([GRB.CONTINUOUS if not integer else (GRB.BINARY if lo >= 0 and hi <= 1 else GRB.INTEGER)
                       for integer, lo, hi in zip(model.integer, model.lower, model.upper, strict=True)])
    xs = m.addMVar(model.n_vars, lb=model.lower, ub=model.upper, obj=model.objective, vtype=vtypes).tolist()
    m.ObjCon = model.objective_offset
    for r in range(model.n_rows):
        idx, val = model.row(r)
        expr = gp.LinExpr(val.tolist(), [xs[j] for j in idx])
        lo, hi = float(model.row_lower[r]), float(model.row_upper[r])
        if lo == hi:
            m.addLConstr(expr, GRB.EQUAL, lo)
            continue
        if math.isfinite(hi):
            m.addLConstr(expr, GRB.LESS_EQUAL, hi)
        if math.isfinite(lo):
            m.addLConstr(expr, GRB.GREATER_EQUAL, lo)
    m.Params.TimeLimit = limits.remaining_s()
    m.Params.MIPGap = limits.mip_gap
    m.Params.Threads = max(1, limits.threads)
    if model.start is not None:
        for x, value in zip(xs, model.start, strict=True):
            x.Start = float(value)
    with on_stop(limits, m.terminate):
        m.optimize(_callback(xs, model, limits, on_progress))
    return _result(m, xs, model)


def _require() -> None:
    if gp is None:
        raise BackendUnavailable(f"The gurobi backend needs gurobipy (pip install gurobipy): {_IMPORT_ERROR}.")


def _callback(xs: list[Any], model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> Any:
    watched_vars = [xs[j] for j in (model.watch if model.watch is not None else [])]
    started = time.monotonic()
    last_bound_at = [0.0]

    def callback(m: Any, where: int) -> None:
        if limits.stop.is_set():
            m.terminate()
        now = time.monotonic()
        if where == GRB.Callback.MIPSOL:
            on_progress(SolverProgress(now - started, objective=m.cbGet(GRB.Callback.MIPSOL_OBJ),
                                       bound=m.cbGet(GRB.Callback.MIPSOL_OBJBND),
                                       watched=np.array(m.cbGetSolution(watched_vars))))
        elif where == GRB.Callback.MIP and now - last_bound_at[0] >= _BOUND_EVERY_S:
            last_bound_at[0] = now
            on_progress(SolverProgress(now - started, bound=m.cbGet(GRB.Callback.MIP_OBJBND)))

    return callback


def _result(m: Any, xs: list[Any], model: MilpModel) -> BackendResult:
    status = m.Status
    log = [f"Gurobi status {status}"]
    if status in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
        return BackendResult(EngineStatus.INFEASIBLE, log=log)
    is_mip = bool(model.integer.any())
    if m.SolCount == 0:
        return BackendResult(EngineStatus.NO_SOLUTION, bound=m.ObjBound if is_mip else None, log=log)
    x = np.array([v.X for v in xs])
    objective = m.ObjVal
    if status == GRB.OPTIMAL:
        return BackendResult(EngineStatus.OPTIMAL, x, objective, m.ObjBound if is_mip else objective, log=log)
    if not is_mip:
        return BackendResult(EngineStatus.NO_SOLUTION, log=log)
    return BackendResult(EngineStatus.FEASIBLE, x, objective, m.ObjBound, log=log)
