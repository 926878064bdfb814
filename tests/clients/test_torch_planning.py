"""The planner's service path: which solver options travel with a request to a remat service, and the
transfer and host budget of a plan that may copy values to host memory."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from factories import chain, result_document  # noqa: E402

from remat.clients.torch import PlanRejected, backend, check_result  # noqa: E402
from remat.clients.torch._planning import Planner  # noqa: E402
from remat.schedules import InvalidRequest, Transfer  # noqa: E402
from remat.solvers import ResultDocument  # noqa: E402

pytestmark = pytest.mark.torch


class _Client:
    """Stands in for remat.clients.http.Client, keeping what ``solve`` was asked."""

    asked: dict[str, Any] = {}

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def solve(self, graph: Any, **request: Any) -> ResultDocument:
        _Client.asked = request
        return result_document()


def test_strategy_options_go_to_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("remat.clients.http.Client", _Client)
    planner = Planner("checkmate", server="http://remat", options={"time_limit_s": 5, "options": {"path": "milp"}})
    planner.result(chain(3), 10, what="a step")
    assert _Client.asked == {"budget": 10, "strategy": "checkmate", "time_limit_s": 5, "options": {"path": "milp"}}


def test_the_transfer_and_host_budget_go_to_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("remat.clients.http.Client", _Client)
    planner = Planner("offload-window", server="http://remat", host_budget=1 << 20)
    planner.result(chain(3), 10, what="a step", transfer=Transfer(bandwidth=4.0, latency=0.5))
    assert _Client.asked == {"budget": 10, "strategy": "offload-window", "host_budget": 1 << 20,
                             "transfer": {"bandwidth": 4.0, "latency": 0.5}}


def test_options_a_service_does_not_take_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="drop threads"):
        Planner("checkmate", server="http://remat", options={"threads": 2})
    Planner("checkmate", server="http://remat", options={"convergence": None})  # a service takes it


def test_a_result_to_follow_is_read_once_from_its_json_or_taken_as_a_document() -> None:
    doc = result_document(budget=1 << 20)
    for given in (doc, doc.to_json()):
        remat_backend = backend(result=given, cache=False)
        assert remat_backend.planner is not None and remat_backend.planner.given == doc
        assert remat_backend.budget is not None and remat_backend.budget.total == 1 << 20  # its own budget
    with pytest.raises(InvalidRequest, match=r"result= must be a remat.result/v1 .*lacks 'graph_name'") as refused:
        backend(result={"format": "remat.result/v1", "status": "feasible"}, cache=False)
    assert refused.value.field == "result"


def test_an_output_kept_apart_shares_memory_with_the_instance_it_came_from_only():
    from types import SimpleNamespace

    from remat.clients.torch._planning import _counting_parts_once
    from remat.schedules import Graph, Plan, simulate

    graph = Graph.from_json({"format": "remat.graph/v1", "fixed_memory": 0, "nodes": [
        {"id": "op", "deps": [], "cost": 1, "memory": 10},              # allocates its output and the part
        {"id": "part", "deps": ["op"], "cost": 0, "memory": 2},         # one of its outputs, kept apart
        {"id": "use", "deps": ["op", "part"], "cost": 1, "memory": 1}]})
    joint = SimpleNamespace(producers=[SimpleNamespace(name="op", output_of=None),
                                       SimpleNamespace(name="part", output_of="op"),
                                       SimpleNamespace(name="use", output_of=None)])
    taken = Plan.of([("compute", 0), ("compute", 1), ("compute", 2)])       # the part is in the op's storage
    again = Plan.of([("compute", 0), ("compute", 1), ("free", 0), ("compute", 0), ("compute", 2)])
    assert _counting_parts_once(graph, joint, taken, simulate(graph, taken)).timeline.tolist() == [10, 10, 11]
    # computed again, the op allocates all its outputs anew: the part taken before is a storage of its own
    assert _counting_parts_once(graph, joint, again, simulate(graph, again)).timeline.tolist() == [10, 10, 2, 12, 13]


def test_below_the_floor_the_leanest_plan_quoted_is_the_strategys_own_search(monkeypatch) -> None:
    """Under the graph's floor the strategy does not search: it is asked at the floor for the least its plans hold,
    which is what a refusal quotes and what a split step's graph is planned at (the baseline may hold more)."""
    monkeypatch.setattr("remat.solvers.baselines._checkpoint.LARGEST_PLAN", 0)  # checkpoint-last declines
    graph = chain(12, memory=8)
    planner = Planner("checkmate", progress=False)
    result, _ = planner.result(graph, graph.min_feasible_budget - 1, what="a step")
    assert result.smallest_peak is not None and result.smallest_peak < graph.checkpoint_all_peak
    leanest, _ = planner.result(graph, result.smallest_peak, what="a step")
    assert leanest.status.value in ("optimal", "feasible") and leanest.peak_memory <= result.smallest_peak


def test_below_the_least_any_plan_holds_the_leanest_plan_is_quoted_not_followed() -> None:
    graph = chain(4, memory=8)
    budget = graph.min_feasible_budget - 1
    result, _ = Planner("checkmate", progress=False).result(graph, budget, what="a step")
    with pytest.raises(PlanRejected, match="The leanest plan found peaks at"):
        check_result(graph, result, budget=budget)
