"""The planner's service path: which solver options travel with a request to a remat service, and the
transfer and host budget of a plan that may copy values to host memory."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from factories import chain  # noqa: E402

from remat.clients.torch._planning import Planner  # noqa: E402
from remat.schedules import InvalidRequest, Transfer  # noqa: E402

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

    def solve(self, graph: Any, **request: Any) -> dict[str, Any]:
        _Client.asked = request
        return {"status": "feasible"}


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
