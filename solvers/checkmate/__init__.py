"""remat.solvers.checkmate: the Checkmate MILP, its solution paths, and its LP rounding.

A second tier below :mod:`remat.solvers`: tests and benchmarks may import these names. The model
(:mod:`._model`) is engine-neutral; :mod:`._milp` solves it on a backend; :mod:`._strategy` is the
``checkmate`` strategy and its paths (``anneal`` in :mod:`._anneal`, ``anneal-milp`` in
:mod:`._anneal_milp`, ``milp``); :mod:`._lp_rounding` is ``checkmate-lp``; :mod:`._windows` proves
budgets infeasible over a few stages.
"""

from ._anneal_milp import MILP_NODES
from ._lp_rounding import OPTIONS as LP_OPTIONS
from ._lp_rounding import checkmate_lp, rounding_candidates
from ._milp import solve_milp
from ._model import MAX_MEMORY_UNITS, CheckmateModel, MemoryScale, build_checkmate_model
from ._strategy import OPTIONS, PATHS, SolutionPath, checkmate
from ._windows import NEAR_FLOOR, WIDTHS, prove_infeasible

__all__ = [
    "LP_OPTIONS",
    "MAX_MEMORY_UNITS",
    "MILP_NODES",
    "NEAR_FLOOR",
    "OPTIONS",
    "PATHS",
    "WIDTHS",
    "CheckmateModel",
    "MemoryScale",
    "SolutionPath",
    "build_checkmate_model",
    "checkmate",
    "checkmate_lp",
    "prove_infeasible",
    "rounding_candidates",
    "solve_milp",
]
