"""Strategies whose time or memory outgrows the graph take graphs up to a node limit, and name one that takes more."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import chain, stacked_blocks

from remat.schedules import GraphLimits, StrategyNotApplicable
from remat.solvers import STRATEGIES, NodeLimit, plan_sweep, solve


def test_the_strategies_that_outgrow_the_graph_name_one_without_a_limit():
    limited = {name: s.node_limit for name, s in STRATEGIES.items() if s.node_limit is not None}
    assert {name: limit.nodes for name, limit in limited.items()} == {
        "checkpoint-last": 20_000, "griewank": 5_000, "checkmate-lp": 700}
    for limit in limited.values():
        assert STRATEGIES[limit.instead].node_limit is None
        assert limit.nodes < GraphLimits().max_nodes


def test_a_graph_over_the_limit_is_refused_before_the_strategy_runs_and_left_out_of_sweeps(
        monkeypatch: pytest.MonkeyPatch):
    graph = chain(5)  # 11 nodes
    strategy = replace(STRATEGIES["checkpoint-all"], node_limit=NodeLimit(10, "it is a test", instead="checkmate"))
    monkeypatch.setitem(STRATEGIES, "checkpoint-all", strategy)
    with pytest.raises(StrategyNotApplicable) as refused:
        solve(graph, budget_ratio=1.0, strategy="checkpoint-all")
    assert str(refused.value) == ("Strategy 'checkpoint-all' takes graphs of at most 10 nodes (it is a test); this one "
                                  "has 11. Use 'checkmate', whose time and memory grow in proportion to the graph.")
    assert refused.value.field == "strategy"
    assert "checkpoint-all" not in plan_sweep(graph, time_limit_s=10).strategies
    assert solve(chain(4), budget_ratio=1.0, strategy="checkpoint-all").status.value == "feasible"  # 9 nodes


@pytest.mark.parametrize("path", ["milp", "anneal-milp"])
def test_checkmate_told_to_build_the_whole_milp_refuses_a_graph_over_its_limit(path: str):
    with pytest.raises(StrategyNotApplicable, match=f"^Path '{path}' builds the whole MILP, which takes graphs of at "
                                                    "most 700 nodes .*; this one has 1,003. Leave 'path' unset") as no:
        solve(stacked_blocks(100), budget_ratio=0.6, options={"path": path})
    assert no.value.field == "options"
