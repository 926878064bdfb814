"""The ``cbc`` backend: COIN-OR CBC through PuLP, which runs the CBC executable as a subprocess.

CBC reports through its log, which PuLP writes to a file: a thread follows the file and turns
"Integer solution of ..." and "best solution, best possible" lines into progress (objective and
bound; CBC does not hand out incumbent values while it runs). CBC leaves the objective's constant
out of everything it prints and of its relative gap, so the constant is added back to what is read,
and the requested gap is also passed as an absolute gap of ``mip_gap * constant`` (a valid stopping
rule when the constant is a lower bound of the objective, as for every Checkmate model). A stop
request sends CBC SIGINT, on which it ends the search and writes its best solution for PuLP to read.

CBC's integer preprocessing (CglPreProcess) is off: with it, CBC 2.10 declares a wrong solution
optimal on small Checkmate models (cost 58 where 55.5 is optimal, see tests/solvers/test_backends.py).
"""

from __future__ import annotations

import math
import os
import re
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from remat.schedules import BackendUnavailable

from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress, on_stop

try:
    import pulp
except ImportError as e:  # pragma: no cover - exercised only where PuLP is missing
    pulp = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

__all__ = ["solve"]

_SOLUTION = re.compile(r"Cbc00(?:04|12)I Integer solution of (\S+)")
_NODES = re.compile(r"Cbc0010I After \d+ nodes, \d+ on tree, (\S+) best solution, best possible (\S+)")
_FINAL_BOUND = re.compile(r"^Lower bound:\s+(\S+)")
_FINAL_OBJECTIVE = re.compile(r"^Objective value:\s+(\S+)")
_CONTINUOUS = re.compile(r"Continuous objective value is (\S+)")


def solve(model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with CBC within ``limits``."""
    if pulp is None:
        raise BackendUnavailable(f"The cbc backend needs PuLP (pip install pulp): {_IMPORT_ERROR}.")
    problem, xs = _problem(model)
    is_mip = bool(model.integer.any())
    with tempfile.TemporaryDirectory(prefix="remat-cbc-") as tmp:
        log_path = Path(tmp) / "cbc.log"
        log_path.touch()
        solver = pulp.PULP_CBC_CMD(
            mip=is_mip, msg=False, timeLimit=limits.remaining_s(), gapRel=limits.mip_gap,
            gapAbs=model.absolute_gap(limits.mip_gap), threads=max(1, limits.threads),
            warmStart=model.start is not None and is_mip, logPath=str(log_path), options=["preprocess off"],
        )
        follower = _LogFollower(log_path, model.objective_offset, on_progress)
        follower.start()
        try:
            with on_stop(limits, _interrupt_children):
                problem.solve(solver)
        except pulp.PulpSolverError as e:
            raise RuntimeError(f"CBC failed: {e}") from None
        finally:
            follower.finish()
    return _result(problem, xs, model, follower, limits.mip_gap)


def _problem(model: MilpModel) -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    problem = pulp.LpProblem("remat", pulp.LpMinimize)
    xs = [
        pulp.LpVariable(f"x{j}", lowBound=lo if math.isfinite(lo) else None, upBound=hi if math.isfinite(hi) else None,
                        cat=pulp.LpInteger if integer else pulp.LpContinuous)
        for j, (lo, hi, integer) in enumerate(zip(model.lower, model.upper, model.integer, strict=True))
    ]
    problem += pulp.LpAffineExpression(
        [(xs[j], float(c)) for j, c in enumerate(model.objective) if c], constant=model.objective_offset)
    for r in range(model.n_rows):
        idx, val = model.row(r)
        expr = pulp.LpAffineExpression([(xs[j], float(v)) for j, v in zip(idx, val, strict=True)])
        lo, hi = float(model.row_lower[r]), float(model.row_upper[r])
        if lo == hi:
            problem += expr == lo
            continue
        if math.isfinite(hi):
            problem += expr <= hi
        if math.isfinite(lo):
            problem += expr >= lo
    if model.start is not None:
        for x, value in zip(xs, model.start, strict=True):
            x.setInitialValue(float(value))
    return problem, xs


def _interrupt_children() -> None:
    """Send SIGINT to this process's children (the CBC executable PuLP started)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            try:
                os.kill(int(entry.name), signal.SIGINT)
            except ProcessLookupError:
                pass


class _LogFollower(threading.Thread):
    """Follows CBC's log file and reports the objective and bound it prints, constant added back."""

    def __init__(self, path: Path, offset: float, on_progress: ProgressCallback) -> None:
        super().__init__(name="remat-cbc-log", daemon=True)
        self.path, self.offset, self.on_progress = path, offset, on_progress
        self.started = time.monotonic()
        self.done = threading.Event()
        self.objective: float | None = None
        self.bound: float | None = None
        self.lines: list[str] = []

    def run(self) -> None:
        with open(self.path, encoding="utf-8", errors="replace") as log:
            while True:
                line = log.readline()
                if line:
                    self._read(line.strip())
                elif self.done.is_set():
                    return
                else:
                    time.sleep(0.05)

    def finish(self) -> None:
        self.done.set()
        self.join()

    def _read(self, line: str) -> None:
        self.lines.append(line)
        del self.lines[:-30]
        found = _SOLUTION.search(line)
        nodes = _NODES.search(line)
        if found:
            self.objective = float(found.group(1)) + self.offset
        elif nodes:
            self.objective, self.bound = float(nodes.group(1)) + self.offset, float(nodes.group(2)) + self.offset
        elif (match := _CONTINUOUS.search(line) or _FINAL_BOUND.search(line)) is not None:
            self.bound = float(match.group(1)) + self.offset
        elif (match := _FINAL_OBJECTIVE.search(line)) is not None:
            self.objective = float(match.group(1)) + self.offset
        else:
            return
        self.on_progress(SolverProgress(time.monotonic() - self.started, objective=self.objective, bound=self.bound))


def _result(problem: pulp.LpProblem, xs: list[pulp.LpVariable], model: MilpModel, follower: _LogFollower,
            mip_gap: float) -> BackendResult:
    log = [*follower.lines, f"CBC status {pulp.LpStatus[problem.status]}, solution {problem.sol_status}"]
    if problem.status == pulp.LpStatusInfeasible or problem.sol_status == pulp.LpSolutionInfeasible:
        return BackendResult(EngineStatus.INFEASIBLE, log=log)
    values = [x.varValue for x in xs]
    if problem.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) or None in values:
        return BackendResult(EngineStatus.NO_SOLUTION, bound=follower.bound, log=log)
    x = np.array(values, dtype=np.float64)
    objective = model.objective_value(x)
    if problem.sol_status == pulp.LpSolutionOptimal:
        # CBC proved the objective within its gaps; that proof is a bound even where the log has none.
        allowance = max(model.absolute_gap(mip_gap) or 0.0, mip_gap * abs(objective - model.objective_offset))
        proved = objective - allowance if model.integer.any() else objective
        bound = max(proved, follower.bound) if follower.bound is not None else proved
        return BackendResult(EngineStatus.OPTIMAL, x, objective, min(bound, objective), log=log)
    return BackendResult(EngineStatus.FEASIBLE, x, objective, follower.bound, log=log)
