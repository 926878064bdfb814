"""The strategy record, its kind, and the applicability checks strategies declare."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from remat.schedules import Graph, InvalidRequest, StrategyNotApplicable, Transfer

from ._context import Outcome, SolveContext
from ._options import Option, shown_value

__all__ = ["NodeLimit", "Strategy", "StrategyKind", "check_chain", "check_training_graph", "every_graph",
           "missing_transfer"]

Runner = Callable[[Graph, int, SolveContext], Outcome]
Check = Callable[[Graph], None]
OptionsCheck = Callable[[Graph, Mapping[str, Any]], None]


def missing_transfer(strategy: str, *, option: str | None = None) -> InvalidRequest:
    """The error for a strategy that offloads (with ``option`` set, if one makes it), run without transfer
    parameters: what to give."""
    how = f" with option {option!r}" if option else ""
    return InvalidRequest(
        f"Strategy {strategy!r}{how} moves values to host memory and needs to know how long copies take: give "
        "'transfer' as {\"bandwidth\": bytes per cost unit, \"latency\": cost units} or "
        "{\"profile\": \"pcie5-x16\", \"seconds_per_cost_unit\": ...}.", field="transfer")


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
class NodeLimit:
    """The largest graph a strategy takes: ``nodes`` at most, because ``grows`` (what outgrows the graph's size),
    and the strategy ``instead`` that takes larger ones (one without a limit of its own)."""

    nodes: int
    grows: str
    instead: str

    def check(self, strategy: str, graph: Graph) -> None:
        """Raise StrategyNotApplicable (``field`` ``strategy``) when ``graph`` has more than ``nodes`` nodes."""
        if graph.size > self.nodes:
            raise StrategyNotApplicable(
                f"Strategy {strategy!r} takes graphs of at most {self.nodes:,} nodes ({self.grows}); this one has "
                f"{graph.size:,}. Use {self.instead!r}, whose time and memory grow in proportion to the graph.",
                field="strategy")


class StrategyKind(StrEnum):
    """What a strategy is, so that nothing infers it from what the strategy uses."""

    BASELINE = "baseline"
    """An engine-free heuristic: deterministic, a warm start and a fallback for the others."""
    MILP = "milp"
    """Solves the Checkmate MILP (or a search that races it) on a solver backend."""
    LP = "lp"
    """Rounds the LP relaxation of the Checkmate MILP, solved on a backend."""


@dataclass(frozen=True)
class Strategy:
    """A named way of choosing a schedule.

    ``run(graph, budget, ctx)`` returns an Outcome; ``kind`` says what it is (a baseline unless
    told); ``check(graph)`` raises StrategyNotApplicable when the strategy does not apply;
    ``backends`` lists the engines it can use (empty for the baselines, which use none); ``knob``
    names the parameter a heuristic searches (one of its options, which pins it); ``options`` declares
    every option it reads from ``ctx.limits.options`` and the values each accepts; ``offloads`` says its plans
    copy values to host memory, so it needs transfer parameters; ``offload_option`` names an option that,
    set to true, makes it offload (``checkmate``'s ``offload``); ``anytime`` says it improves its plan until
    stopped, so a solve's convergence rule may stop it (the others end by themselves, or at the time limit);
    ``node_limit`` caps the graphs it takes when its time or memory grows faster than the graph (None: any graph
    the graph limits admit); ``check_with_options(graph, options)`` refuses what the graph and the options (values
    already checked) do not allow together, such as an option forcing a model too large for the graph.
    :meth:`check_graph` applies all three checks.
    """

    name: str
    summary: str
    run: Runner
    kind: StrategyKind = StrategyKind.BASELINE
    check: Check = every_graph
    backends: tuple[str, ...] = ()
    knob: str | None = None
    options: Mapping[str, Option] = field(default_factory=dict, hash=False)
    offloads: bool = False
    offload_option: str | None = None
    anytime: bool = False
    node_limit: NodeLimit | None = None
    check_with_options: OptionsCheck | None = None

    def __post_init__(self) -> None:
        for name in (self.knob, self.offload_option):
            if name is not None and name not in self.options:
                raise ValueError(f"strategy {self.name!r}: option {name!r} is used but not declared in its options")

    def check_graph(self, graph: Graph, options: Mapping[str, Any] | None = None) -> None:
        """Raise StrategyNotApplicable when this strategy does not take ``graph``: larger than its ``node_limit``,
        refused by its ``check``, or, with ``options`` (whose values :meth:`check_options` accepted), by its
        ``check_with_options``."""
        if self.node_limit is not None:
            self.node_limit.check(self.name, graph)
        self.check(graph)
        if options and self.check_with_options is not None:
            self.check_with_options(graph, options)

    def offloads_with(self, options: Mapping[str, Any] | None = None) -> bool:
        """Whether this strategy, with ``options``, copies values to host memory.

        Raises InvalidRequest when its ``offload_option`` is given as anything but true or false.
        """
        given = options or {}
        if self.offload_option is None or self.offload_option not in given:
            return self.offloads
        chosen = given[self.offload_option]
        self.check_options({self.offload_option: chosen})
        return self.offloads or chosen is True

    def check_transfer(self, transfer: Transfer | None, options: Mapping[str, Any] | None = None) -> None:
        """Raise InvalidRequest when this strategy offloads (with ``options``) and no transfer parameters were given."""
        if self.offloads_with(options) and transfer is None:
            raise missing_transfer(self.name, option=None if self.offloads else self.offload_option)

    def check_backend(self, backend: str | None) -> None:
        """Raise InvalidRequest unless ``backend`` is ``auto`` (or None) or one of the engines this strategy uses."""
        if backend in ("auto", None) or backend in self.backends:
            return
        if not self.backends:
            raise InvalidRequest(f"Strategy {self.name!r} uses no solver backend; leave 'backend' as 'auto'.",
                                 field="backend")
        raise InvalidRequest(f"Unknown backend {backend!r} for {self.name!r}; choose one of: auto, "
                             f"{', '.join(self.backends)}.", field="backend")

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Raise InvalidRequest naming the first option this strategy does not read, or the first whose value
        its declaration (:class:`~remat.solvers.Option`) does not accept, and what it accepts."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            takes = f"the options are: {', '.join(self.options)}" if self.options else "it takes none"
            raise InvalidRequest(f"Unknown option {shown_value(unknown[0])} for {self.name}; {takes}.",
                                 field="options")
        for name, value in options.items():
            accepts = self.options[name].problem(value)
            if accepts is not None:
                raise InvalidRequest(f"Option {name!r} of {self.name} must be {accepts}, got {shown_value(value)}.",
                                     field="options")
