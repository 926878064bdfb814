"""remat.solvers.baselines: the engine-free heuristics, and the best of them as a warm start.

A second tier below :mod:`remat.solvers`: tests and benchmarks may import these names, users
should not need to. :data:`BASELINES` lists the strategies of kind ``baseline``; the registry is
composed from it (:mod:`remat.solvers._registry`).
"""

from ._articulation import articulation_points, check_articulation_points
from ._best import best_baseline
from ._checkpoint import LARGEST_GRAPH, LARGEST_PLAN, checkpoint_all, checkpoint_last, checkpoint_last_schedule
from ._chen import (
    SEGMENT_BUDGET,
    ap_greedy,
    ap_sqrtn,
    greedy_checkpoints,
    linearized_greedy,
    linearized_sqrtn,
    segment_budgets,
    sqrtn_checkpoints,
)
from ._griewank import LARGEST_CHAIN, SNAPSHOTS, binomial_steps, delivery_steps, griewank, revolve_schedule
from ._knob import EXHAUSTIVE_LIMIT, TRIAL_LIMIT, search_knob
from ._segments import retention_schedule, segment_schedule
from ._table import BASELINES

__all__ = [
    "BASELINES",
    "EXHAUSTIVE_LIMIT",
    "LARGEST_CHAIN",
    "LARGEST_GRAPH",
    "LARGEST_PLAN",
    "SEGMENT_BUDGET",
    "SNAPSHOTS",
    "TRIAL_LIMIT",
    "ap_greedy",
    "ap_sqrtn",
    "articulation_points",
    "best_baseline",
    "binomial_steps",
    "check_articulation_points",
    "checkpoint_all",
    "checkpoint_last",
    "checkpoint_last_schedule",
    "delivery_steps",
    "greedy_checkpoints",
    "griewank",
    "linearized_greedy",
    "linearized_sqrtn",
    "retention_schedule",
    "revolve_schedule",
    "search_knob",
    "segment_budgets",
    "segment_schedule",
    "sqrtn_checkpoints",
]
