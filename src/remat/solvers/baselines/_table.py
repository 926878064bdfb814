"""The baselines: engine-free heuristics, each a strategy of kind ``baseline``, in the registry's order.

They are the strategies every solver strategy starts from and falls back on (:mod:`._best`); the
registry (:mod:`remat.solvers._registry`) lists them first.
"""

from __future__ import annotations

from .._strategy import NodeLimit, Strategy, check_chain, check_training_graph
from ._articulation import check_articulation_points
from ._checkpoint import LARGEST_GRAPH, check_checkpoint_last, checkpoint_all, checkpoint_last
from ._chen import SEGMENT_BUDGET, SEGMENT_BUDGET_OPTION, ap_greedy, ap_sqrtn, linearized_greedy, linearized_sqrtn
from ._griewank import LARGEST_CHAIN, SNAPSHOTS, SNAPSHOTS_OPTION, griewank

__all__ = ["BASELINES"]

_SEGMENT_BUDGET = {SEGMENT_BUDGET: SEGMENT_BUDGET_OPTION}

BASELINES: tuple[Strategy, ...] = (
    Strategy("checkpoint-all", "No rematerialization: every value kept until its last use.", checkpoint_all),
    Strategy("checkpoint-last", "Minimum-memory baseline: keep only the newest value, recompute the rest.",
             checkpoint_last, check=check_checkpoint_last,
             node_limit=NodeLimit(LARGEST_GRAPH, "its plan grows with the square of the graph", instead="checkmate")),
    Strategy("chen-sqrtn", "Chen et al.'s sqrt(n) checkpoints on a chain; each segment recomputed once.",
             linearized_sqrtn, check=check_chain),
    Strategy("chen-greedy", "Chen et al.'s greedy segments on a chain; segment budget searched for the best fit.",
             linearized_greedy, check=check_chain, knob=SEGMENT_BUDGET, options=_SEGMENT_BUDGET),
    Strategy("griewank", "Griewank-Walther revolve (binomial checkpointing) on a chain; snapshots searched.",
             griewank, check=check_chain, knob=SNAPSHOTS, options={SNAPSHOTS: SNAPSHOTS_OPTION},
             node_limit=NodeLimit(LARGEST_CHAIN, "its snapshot search grows with the square of the chain",
                                  instead="checkmate")),
    Strategy("ap-sqrtn", "Chen's sqrt(n) over the articulation points of the forward graph.",
             ap_sqrtn, check=check_articulation_points),
    Strategy("ap-greedy", "Chen's greedy over the articulation points; segment budget searched.",
             ap_greedy, check=check_articulation_points, knob=SEGMENT_BUDGET,
             options=_SEGMENT_BUDGET),
    Strategy("linearized-sqrtn", "Chen's sqrt(n) over every forward node in execution order.",
             linearized_sqrtn, check=check_training_graph),
    Strategy("linearized-greedy", "Chen's greedy over every forward node in execution order; budget searched.",
             linearized_greedy, check=check_training_graph, knob=SEGMENT_BUDGET,
             options=_SEGMENT_BUDGET),
)
"""Every baseline strategy (kind ``baseline``, no backend), in the order the registry lists them."""
