"""ResultDocument: remat.result/v1 read and written back byte for byte, and malformed documents refused."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
from factories import chain, offload_result

from remat.schedules import InvalidResult, Transfer
from remat.solvers import RESULT_BULK, RESULT_FORMAT, ResultDocument, ResultStatus, solve
from remat.solvers._document import _KINDS

KEYS = ["format", "graph_name", "graph_sha256", "strategy", "backend", "status", "budget", "peak_memory", "cost",
        "base_cost", "overhead", "lower_bound", "gap", "host_peak_memory", "host_budget", "transfer",
        "min_feasible_budget", "smallest_peak", "checkpoint_all_peak", "solve_time_s", "schedule", "plan",
        "fallback", "log"]


def _solved() -> dict:
    return solve(chain(6), budget_ratio=0.6, strategy="checkmate", time_limit_s=10).to_json()


def _same_json(doc: dict) -> None:
    assert json.dumps(ResultDocument.from_json(doc).to_json()) == json.dumps(doc)


def test_the_documented_keys_in_order():
    doc = _solved()
    assert list(doc) == KEYS
    assert ["format", *_KINDS] == KEYS == ["format", *(f.name for f in fields(ResultDocument))]


def test_a_solved_result_reads_back_as_the_same_json():
    result = solve(chain(6), budget_ratio=0.6, strategy="checkmate", time_limit_s=10)
    doc = result.to_json()
    parsed = ResultDocument.from_json(doc)
    assert parsed == result.document()
    assert parsed.status is result.status and parsed.peak_memory == result.peak_memory and parsed.plan is not None
    _same_json(doc)
    _same_json(result.to_json(full_schedule=True, log_tail=1))


@pytest.mark.parametrize("status", list(ResultStatus))
def test_every_status_round_trips(status):
    doc = {**_solved(), "status": status.value}
    assert ResultDocument.from_json(doc).status is status
    _same_json(doc)


def test_a_result_without_a_plan_round_trips():
    doc = {**_solved(), "status": "timeout", "plan": None, "schedule": None, "peak_memory": None, "cost": None,
           "overhead": None, "gap": None, "host_peak_memory": None, "smallest_peak": 7, "backend": None}
    parsed = ResultDocument.from_json(doc)
    assert parsed.plan is None and parsed.schedule is None and parsed.smallest_peak == 7
    _same_json(doc)


def test_a_result_with_transfer_and_host_budget_round_trips():
    doc = offload_result(chain(6), Transfer(bandwidth=40, latency=0.5), host_budget=1).to_json()
    parsed = ResultDocument.from_json(doc)
    assert parsed.transfer == Transfer(bandwidth=40, latency=0.5) and parsed.host_budget == 1
    assert parsed.status is ResultStatus.OVER_BUDGET and parsed.host_peak_memory > 1
    _same_json(doc)


def test_a_summary_leaves_the_bulk_out():
    doc = _solved()
    summary = {k: v for k, v in doc.items() if k not in RESULT_BULK}
    parsed = ResultDocument.from_json(summary, summary=True)
    assert parsed.plan is None and parsed.schedule is None and parsed.log == ()
    assert json.dumps(parsed.to_json(summary=True)) == json.dumps(summary)
    assert ResultDocument.from_json(doc).to_json(summary=True) == summary
    with pytest.raises(InvalidResult, match="lacks 'schedule', 'plan', 'log'"):
        ResultDocument.from_json(summary)


def test_the_document_is_frozen():
    parsed = ResultDocument.from_json(_solved())
    with pytest.raises(AttributeError):
        parsed.status = ResultStatus.ERROR  # type: ignore[misc]
    assert replace(parsed, status=ResultStatus.ERROR).to_json()["status"] == "error"


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"format": "remat.result/v2"}, "format", "Not a remat.result/v1 document: its 'format' is 'remat.result/v2'"),
    ({"format": None}, "format", "its 'format' is None"),
    ({"status": "done"}, "status", "Unknown status 'done'.*one of optimal, feasible"),
    ({"budget": "1 GiB"}, "budget", "'budget' of a remat.result/v1 document must be int, not str"),
    ({"budget": True}, "budget", "must be int, not bool"),
    ({"budget": None}, "budget", "must be int, not NoneType"),
    ({"cost": "1"}, "cost", "must be int or float or null, not str"),
    ({"plan": {"op": "compute"}}, "plan", "'plan'.*must be list or null, not dict"),
    ({"log": ["ok", 3]}, "log", "'log'.*list of strings"),
    ({"transfer": {"bandwidth": 0}}, "transfer", "'transfer' of a remat.result/v1 document: transfer.bandwidth"),
    ({"extra": 1}, "extra", "Unknown field 'extra'"),
])
def test_a_malformed_document_is_refused_naming_the_field(change, field, message):
    with pytest.raises(InvalidResult, match=message) as refused:
        ResultDocument.from_json({**_solved(), **change})
    assert refused.value.field == field


def test_missing_keys_are_named():
    doc = _solved()
    del doc["cost"], doc["log"]
    with pytest.raises(InvalidResult, match="lacks 'cost', 'log'") as refused:
        ResultDocument.from_json(doc)
    assert refused.value.field == "cost"


def test_only_an_object_is_a_document():
    with pytest.raises(InvalidResult, match="must be a JSON object, not list"):
        ResultDocument.from_json([RESULT_FORMAT])
