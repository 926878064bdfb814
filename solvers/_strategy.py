"""The strategy record and the applicability checks strategies declare."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remat.schedules import Graph, InvalidRequest, StrategyNotApplicable

from ._context import Outcome, SolveContext

__all__ = ["Strategy", "check_chain", "check_training_graph", "every_graph"]

Runner = Callable[[Graph, int, SolveContext], Outcome]
Check = Callable[[Graph], None]


def every_graph(graph: Graph) -> None:
    """Applies to every graph."""


def check_training_graph(graph: Graph) -> None:
    """Needs forward nodes to choose checkpoints from."""
    if not graph.forward_nodes:
        raise StrategyNotApplicable("The graph has no forward nodes to checkpoint.")


def check_chain(graph: Graph) -> None:
    """Needs a linear forward pass: each forward node reads at most the forward node just before it.

    Raises StrategyNotApplicable naming the first forward node that branches or joins.
    """
    check_training_graph(graph)
    forward = graph.forward_nodes
    position = {v: k for k, v in enumerate(forward)}
    for k, v in enumerate(forward):
        fwd_deps = [u for u in graph.deps[v] if u in position]
        fwd_users = [w for w in graph.users[v] if w in position]
        expected_dep = [forward[k - 1]] if k else []
        expected_user = [forward[k + 1]] if k + 1 < len(forward) else []
        if fwd_deps != expected_dep or fwd_users != expected_user:
            node = graph.nodes[v].id
            raise StrategyNotApplicable(
                f"This strategy needs a linear forward pass (a chain), but forward node {node!r} "
                f"branches or joins; try a linearized-* or ap-* strategy, or checkmate.",
                node=node,
            )


@dataclass(frozen=True)
class Strategy:
    """A named way of choosing a schedule.

    ``run(graph, budget, ctx)`` returns an Outcome; ``check(graph)`` raises StrategyNotApplicable
    when the strategy does not apply; ``backends`` lists the engines it can use (empty for the
    heuristics, which use none); ``knob`` names the parameter a heuristic searches (an option
    that pins it); ``options`` describes the other options it reads from ``ctx.options``.
    """

    name: str
    summary: str
    run: Runner
    check: Check = every_graph
    backends: tuple[str, ...] = ()
    knob: str | None = None
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Raise InvalidRequest naming the first option this strategy does not read."""
        known = [*([self.knob] if self.knob else []), *self.options]
        unknown = sorted(set(options) - set(known))
        if unknown:
            takes = f"the options are: {', '.join(known)}" if known else "it takes none"
            raise InvalidRequest(f"Unknown option {unknown[0]!r} for {self.name}; {takes}.", field="options")
