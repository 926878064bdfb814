"""remat.solvers.checkmate: the Checkmate MILP, its solution paths, and its LP rounding.

A second tier below :mod:`remat.solvers`: tests and benchmarks may import these names. The model
(:mod:`._model`) is engine-neutral; :mod:`._milp` solves it on a backend; :mod:`._strategy` is the
``checkmate`` strategy and its paths (``anneal`` in :mod:`._anneal`, ``anneal-milp`` in
:mod:`._anneal_milp`, ``milp``); :mod:`._lp_rounding` is ``checkmate-lp``; :mod:`._windows` proves
budgets infeasible over a few stages; :mod:`._offload_model` and :mod:`._offload_milp` are the MILP that also
moves values to host memory, for the ``checkmate-offload`` strategy.
"""

from ._anneal_milp import MILP_NODES
from ._lp_rounding import OPTIONS as LP_OPTIONS
from ._lp_rounding import checkmate_lp, rounding_candidates
from ._milp import solve_milp
from ._model import MAX_MEMORY_UNITS, MODEL_NODES, CheckmateModel, MemoryScale, Solution, build_checkmate_model
from ._offload_milp import ROUNDS, solve_offload_milp
from ._offload_model import OffloadModel, build_offload_model
from ._strategy import OPTIONS, PATHS, SolutionPath, check_path, checkmate
from ._windows import NEAR_FLOOR, WIDTHS, prove_infeasible

__all__ = [
    "LP_OPTIONS",
    "MAX_MEMORY_UNITS",
    "MILP_NODES",
    "MODEL_NODES",
    "NEAR_FLOOR",
    "OPTIONS",
    "PATHS",
    "ROUNDS",
    "WIDTHS",
    "CheckmateModel",
    "MemoryScale",
    "OffloadModel",
    "Solution",
    "SolutionPath",
    "build_checkmate_model",
    "build_offload_model",
    "check_path",
    "checkmate",
    "checkmate_lp",
    "prove_infeasible",
    "rounding_candidates",
    "solve_milp",
    "solve_offload_milp",
]
