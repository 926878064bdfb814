"""Values that can never succeed are refused at admission: NaN and Infinity, text that is not Unicode, option
values too long, anywhere in a request; a 422 that encodes and names the field, no job, nothing of it logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from factories import chain
from fastapi.testclient import TestClient

from remat.service import Settings, create_app
from remat.service._problems import shown
from remat.service._values import MAX_OPTION_TEXT, first_unusable
from remat.solvers import STRATEGIES, Option, OptionKind

NAN, INF = float("nan"), float("inf")
LONE = "\ud800x"
"""Text with a lone surrogate: JSON can spell it (``"\\ud800x"``), Python's parser reads it, nothing encodes it."""
Change = Callable[[dict[str, Any]], None]


def _solve() -> dict[str, Any]:
    return {"graph": chain(4).to_json(), "budget_ratio": 1.0, "strategy": "chen-greedy", "wait_s": 0, "options": {}}


def _set(*path: str | int, value: Any) -> Change:
    """A change that puts ``value`` at ``path`` of a request (the last step may be a new key)."""
    def change(body: dict[str, Any]) -> None:
        target: Any = body
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


def _post(client: TestClient, route: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as Python's JSON writes it (NaN, Infinity and lone surrogates as escapes, as an attacker may)."""
    return client.post(route, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def roomy(settings: Settings) -> Iterator[TestClient]:
    """The app with a 16 MiB body cap, so a 10 MB value reaches the schemas."""
    roomy = settings.model_copy(update={"max_body_bytes": 16 * 2**20})
    with TestClient(create_app(roomy), raise_server_exceptions=False) as c:
        yield c


NON_FINITE = {
    "option value": _set("options", "segment_budget", value=NAN),
    "budget": _set("budget", value=INF),
    "budget_ratio": _set("budget_ratio", value=NAN),
    "mip_gap": _set("mip_gap", value=NAN),
    "time_limit_s": _set("time_limit_s", value=INF),
    "wait_s": _set("wait_s", value=-INF),
    "node cost": _set("graph", "nodes", 1, "cost", value=NAN),
    "node memory": _set("graph", "nodes", 1, "memory", value=INF),
    "node metadata": _set("graph", "nodes", 1, "flops", value=INF),
    "nested node metadata": _set("graph", "nodes", 1, "shape", value=[2, NAN]),
    "graph metadata": _set("graph", "batch_tokens", value=NAN),
    "fixed_memory": _set("graph", "fixed_memory", value=INF),
    "transfer": _set("transfer", value={"bandwidth": NAN, "latency": 1}),
    "convergence": _set("convergence", value={"window_s": INF, "tolerance": 0.01}),
}
NOT_UNICODE = {
    "graph name": _set("graph", "name", value=LONE),
    "node id": _set("graph", "nodes", 0, "id", value=LONE),
    "dep": _set("graph", "nodes", 1, "deps", value=[LONE]),
    "node metadata": _set("graph", "nodes", 1, "op", value=LONE),
    "node metadata name": _set("graph", "nodes", 1, LONE, value=1),
    "cost_unit": _set("graph", "cost_unit", value=LONE),
    "strategy": _set("strategy", value=LONE),
    "option name": _set("options", LONE, value=1),
    "option value": _set("options", "segment_budget", value=LONE),
}


def _refused(client: TestClient, body: dict[str, Any], route: str = "/v1/solve") -> dict[str, Any]:
    """The problem document of a request refused at admission (422, valid UTF-8 JSON); no job was made."""
    r = _post(client, route, body)
    assert r.status_code == 422, (r.status_code, r.text[:500])
    problem = json.loads(r.content.decode("utf-8"))  # strict: it encodes
    assert client.get("/v1/jobs").json()["count"] == 0
    return problem


@pytest.mark.parametrize("change", NON_FINITE.values(), ids=NON_FINITE.keys())
def test_nan_and_infinity_anywhere_are_refused_at_admission(client: TestClient, change: Change):
    body = _solve()
    change(body)
    problem = _refused(client, body)
    assert problem["type"] == "urn:remat:problem:invalid-request" and problem["field"], problem


@pytest.mark.parametrize("change", NOT_UNICODE.values(), ids=NOT_UNICODE.keys())
def test_text_that_is_not_unicode_is_refused_with_a_problem_that_encodes(client: TestClient, change: Change):
    body = _solve()
    change(body)
    problem = _refused(client, body)
    assert "\\ud800" in json.dumps(problem) or problem["field"], problem


@pytest.mark.parametrize("route", ["/v1/sweeps", "/v1/max-batch"])
def test_sweeps_and_searches_refuse_them_too(client: TestClient, route: str):
    graph = chain(4).to_json()
    body = ({"graph": graph, "strategies": ["chen-greedy"], "budgets": [10]} if route == "/v1/sweeps" else
            {"graphs": [{"batch": 1, "graph": graph}, {"batch": 2, "graph": graph}], "budget": 10})
    body["graph" if route == "/v1/sweeps" else "graphs"] = json.loads(json.dumps(body.get("graph") or body["graphs"]))
    where = body["graph"] if route == "/v1/sweeps" else body["graphs"][1]["graph"]
    where["nodes"][2]["cost"] = NAN
    assert _refused(client, body, route)["field"].endswith("cost")
    where["nodes"][2]["cost"] = 1.0
    where["nodes"][2]["id"] = LONE
    _refused(client, body, route)


def test_a_10_mb_option_value_is_refused_and_never_echoed_or_logged(roomy: TestClient,
                                                                     caplog: pytest.LogCaptureFixture):
    big = "p" * 10**7
    caplog.set_level(logging.DEBUG)
    for options in ({"segment_budget": big}, {big: 1}):
        r = _post(roomy, "/v1/solve", {**_solve(), "options": options})
        assert r.status_code in (413, 422) and len(r.content) < 2048, (r.status_code, len(r.content))
    assert roomy.get("/v1/jobs").json()["count"] == 0
    assert all(len(record.getMessage()) < 1024 for record in caplog.records)


def test_first_unusable_names_where_and_why():
    assert first_unusable({"a": [1, 2.5, "x", None, True], "b": {"c": "é"}}) is None
    assert first_unusable({"a": [1, {"b": NAN}]})[:2] == (("a", 1, "b"), "finite_number")
    assert first_unusable({"a": {LONE: 1}})[:2] == (("a", LONE), "string_unicode")
    assert first_unusable([LONE])[:2] == ((0,), "string_unicode")


def test_shown_text_encodes_and_is_short():
    assert shown(LONE) == "\\ud800x" and shown(LONE).encode("utf-8")
    assert shown("n" * 10**6).endswith("(1000000 characters)") and len(shown("n" * 10**6)) < 200


def _bad_values(option: Option) -> list[Any]:
    """Values of the right JSON kinds that ``option`` still refuses: another kind, out of range, no choice."""
    if option.kind is OptionKind.FLAG:
        return ["yes", 1]
    if option.kind is OptionKind.CHOICE:
        return ["bogus", 2, "x" * MAX_OPTION_TEXT]
    return [option.least - 1, 2.5, False, "3", *([option.most + 1] if option.most is not None else [])]


OPTIONS = [(s.name, name, option) for s in STRATEGIES.values() for name, option in s.options.items()]


@pytest.mark.parametrize("strategy, name, option", OPTIONS, ids=[f"{s}.{n}" for s, n, _ in OPTIONS])
def test_an_option_value_no_solve_accepts_is_refused_at_admission(client: TestClient, strategy: str, name: str,
                                                                   option: Option, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    for value in _bad_values(option):
        body = {**_solve(), "strategy": strategy, "options": {name: value}}
        problem = _refused(client, body)
        assert problem["field"] == "options", problem
        assert f"Option {name!r} of {strategy} must be {option.accepts}, got " in problem["detail"], problem
        assert len(problem["detail"]) < 400 and "x" * 101 not in problem["detail"], problem["detail"][:500]
    assert all(len(record.getMessage()) < 1024 for record in caplog.records)
