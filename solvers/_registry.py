"""The one table of strategies: the CLI, the service and the dashboard all list from here."""

from __future__ import annotations

from remat.schedules import UnknownStrategy

from ._articulation import check_articulation_points
from ._checkmate import OPTIONS as CHECKMATE_OPTIONS
from ._checkmate import checkmate
from ._checkpoint import checkpoint_all, checkpoint_last
from ._chen import SEGMENT_BUDGET, ap_greedy, ap_sqrtn, linearized_greedy, linearized_sqrtn
from ._griewank import SNAPSHOTS, griewank
from ._lp_rounding import OPTIONS as LP_OPTIONS
from ._lp_rounding import checkmate_lp
from ._strategy import Strategy, check_chain, check_training_graph
from .backends import BACKENDS

__all__ = ["STRATEGIES", "get_strategy"]

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("checkpoint-all", "No rematerialization: every value kept until its last use.", checkpoint_all),
        Strategy("checkpoint-last", "Minimum-memory baseline: keep only the newest value, recompute the rest.",
                 checkpoint_last),
        Strategy("chen-sqrtn", "Chen et al.'s sqrt(n) checkpoints on a chain; each segment recomputed once.",
                 linearized_sqrtn, check=check_chain),
        Strategy("chen-greedy", "Chen et al.'s greedy segments on a chain; segment budget searched for the best fit.",
                 linearized_greedy, check=check_chain, knob=SEGMENT_BUDGET),
        Strategy("griewank", "Griewank-Walther revolve (binomial checkpointing) on a chain; snapshots searched.",
                 griewank, check=check_chain, knob=SNAPSHOTS),
        Strategy("ap-sqrtn", "Chen's sqrt(n) over the articulation points of the forward graph.",
                 ap_sqrtn, check=check_articulation_points),
        Strategy("ap-greedy", "Chen's greedy over the articulation points; segment budget searched.",
                 ap_greedy, check=check_articulation_points, knob=SEGMENT_BUDGET),
        Strategy("linearized-sqrtn", "Chen's sqrt(n) over every forward node in execution order.",
                 linearized_sqrtn, check=check_training_graph),
        Strategy("linearized-greedy", "Chen's greedy over every forward node in execution order; budget searched.",
                 linearized_greedy, check=check_training_graph, knob=SEGMENT_BUDGET),
        Strategy("checkmate", "Optimal MILP of the Checkmate paper, warm-started from the best baseline.", checkmate,
                 backends=tuple(BACKENDS), options=CHECKMATE_OPTIONS),
        Strategy("checkmate-lp", "LP relaxation with two-phase rounding; its LP value is a lower bound.", checkmate_lp,
                 backends=tuple(name for name, b in BACKENDS.items() if b.lp), options=LP_OPTIONS),
    )
}


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; UnknownStrategy lists the valid names otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UnknownStrategy(
            f"Unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}."
        ) from None
