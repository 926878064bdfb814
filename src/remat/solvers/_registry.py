"""The one table of strategies: the CLI, the service and the dashboard all list from here.

It is composed of the baselines (:data:`remat.solvers.baselines.BASELINES`), the engine-free
strategies that offload (:data:`remat.solvers.offload.OFFLOAD_BASELINES`) and the solver
strategies, which use a backend and start from the best baseline.
"""

from __future__ import annotations

from remat.schedules import UnknownStrategy

from ._options import Option
from ._strategy import NodeLimit, Strategy, StrategyKind
from .backends import BACKENDS
from .baselines import BASELINES
from .checkmate import LP_OPTIONS, MODEL_NODES, OPTIONS, check_path, checkmate_lp
from .offload import JOINT_OPTIONS, OFFLOAD_BASELINES, checkmate_offload, checkmate_or_offload

__all__ = ["SOLVERS", "STRATEGIES", "get_strategy"]

SOLVERS: tuple[Strategy, ...] = (
    Strategy("checkmate", "Optimal MILP of the Checkmate paper, warm-started from the best baseline.",
             checkmate_or_offload, kind=StrategyKind.MILP, backends=tuple(BACKENDS), offload_option="offload",
             anytime=True, check_with_options=check_path,
             options={**OPTIONS, "offload": Option.flag("true to also move values to host memory, as "
                                                        "checkmate-offload does (needs 'transfer')")}),
    Strategy("checkmate-lp", "LP relaxation with two-phase rounding; its LP value is a lower bound.", checkmate_lp,
             kind=StrategyKind.LP, backends=tuple(name for name, b in BACKENDS.items() if b.lp), options=LP_OPTIONS,
             node_limit=NodeLimit(MODEL_NODES, "its LP has a variable for every pair of nodes", instead="checkmate")),
    Strategy("checkmate-offload", "Keep, recompute or offload each value: the best of remat only, the offload "
             "baselines, remat plans moved down to the budget, and a joint MILP on small graphs.", checkmate_offload,
             kind=StrategyKind.MILP, backends=tuple(BACKENDS), options=JOINT_OPTIONS, offloads=True, anytime=True,
             check_with_options=check_path),
)
"""The strategies that solve on a backend, after the baselines in the registry."""

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (*BASELINES, *OFFLOAD_BASELINES, *SOLVERS)}


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; UnknownStrategy lists the valid names otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UnknownStrategy(
            f"Unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}."
        ) from None
