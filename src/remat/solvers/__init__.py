"""remat.solvers: strategies that choose schedules, the strategy registry, and solve().

A strategy is a plain function ``run(graph, budget, ctx) -> Outcome``; :func:`solve` is the one
place that turns an outcome into a simulated :class:`Result`.
"""

from ._children import Child, ChildFailed, Parent, spawn
from ._context import (
    DEFAULT_CONVERGENCE,
    DEFAULT_MIP_GAP,
    DEFAULT_TIME_LIMIT_S,
    Convergence,
    OffloadSettings,
    Outcome,
    Progress,
    SolveContext,
    SolveLimits,
    SolveRecord,
    Stop,
    StopReason,
)
from ._document import FITTING_STATUSES, RESULT_BULK, RESULT_FORMAT, ResultDocument, ResultStatus
from ._max_batch import BatchSearch, BatchTrial, MaxBatch, cost_cap, max_batch
from ._options import Option, OptionKind
from ._registry import STRATEGIES, get_strategy
from ._result import Result
from ._solve import solve
from ._strategy import NodeLimit, Strategy, StrategyKind, check_chain, check_training_graph, every_graph
from ._supervise import SOLVE_GRACE_S, StopThenKill
from ._sweep import SWEEP_POINTS, SweepPlan, plan_sweep, sweep_budgets, sweep_strategies
from .backends import available_backends
from .baselines import (
    BASELINES,
    articulation_points,
    binomial_steps,
    checkpoint_all,
    checkpoint_last,
    revolve_schedule,
    segment_schedule,
)

__all__ = [
    "BASELINES",
    "DEFAULT_CONVERGENCE",
    "DEFAULT_MIP_GAP",
    "DEFAULT_TIME_LIMIT_S",
    "FITTING_STATUSES",
    "RESULT_BULK",
    "RESULT_FORMAT",
    "SOLVE_GRACE_S",
    "STRATEGIES",
    "SWEEP_POINTS",
    "BatchSearch",
    "BatchTrial",
    "Child",
    "ChildFailed",
    "Convergence",
    "MaxBatch",
    "NodeLimit",
    "OffloadSettings",
    "Option",
    "OptionKind",
    "Outcome",
    "Parent",
    "Progress",
    "Result",
    "ResultDocument",
    "ResultStatus",
    "SolveContext",
    "SolveLimits",
    "SolveRecord",
    "Stop",
    "StopReason",
    "StopThenKill",
    "Strategy",
    "StrategyKind",
    "SweepPlan",
    "articulation_points",
    "available_backends",
    "binomial_steps",
    "check_chain",
    "check_training_graph",
    "checkpoint_all",
    "checkpoint_last",
    "cost_cap",
    "every_graph",
    "get_strategy",
    "max_batch",
    "plan_sweep",
    "revolve_schedule",
    "segment_schedule",
    "solve",
    "spawn",
    "sweep_budgets",
    "sweep_strategies",
]
