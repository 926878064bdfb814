"""remat.result/v1 as a value: the one writer and the one reader of the result document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any, Final

from remat.schedules import InvalidRequest, InvalidResult, Transfer

__all__ = ["FITTING_STATUSES", "RESULT_BULK", "RESULT_FORMAT", "ResultDocument", "ResultStatus"]

RESULT_FORMAT: Final = "remat.result/v1"

RESULT_BULK: Final = ("schedule", "plan", "log")
"""The fields a summary leaves out: the bulk of a big graph's result, which lists and charts do not need."""


class ResultStatus(StrEnum):
    """How a solve ended; the values are the wire strings of docs/results.md."""

    OPTIMAL = "optimal"
    """The plan fits and is proved optimal within the requested gap."""
    FEASIBLE = "feasible"
    """The plan fits; optimality is not proved."""
    OVER_BUDGET = "over_budget"
    """A heuristic's best plan does not fit the budget; plan and peak are still given."""
    INFEASIBLE = "infeasible"
    """Proved: no plan fits the budget."""
    TIMEOUT = "timeout"
    """Nothing was found in time and no fallback applied."""
    CANCELLED = "cancelled"
    """Stopped on request; the best plan found so far, if any, is given."""
    ERROR = "error"
    """The solver failed; ``log`` says why."""


FITTING_STATUSES = (ResultStatus.OPTIMAL, ResultStatus.FEASIBLE)
"""The statuses of a result whose plan fits the budget (compare wire strings with ``in``)."""


@dataclass(frozen=True, kw_only=True)
class ResultDocument:
    """One remat.result/v1 (docs/results.md), field for field, in the document's key order.

    Built by ``Result.document()`` or parsed by :meth:`from_json`; :meth:`to_json` writes the dict back, so
    a stored document read and written again is the same JSON. ``schedule`` and ``plan`` stay their JSON
    sub-documents (remat.plan/v1 and the Checkmate schedule), read against a graph with ``Plan.from_json``
    and ``ScheduleEntries.from_json``; treat them as read-only.

    Examples
    --------
    >>> doc = {"format": "remat.result/v1", "graph_name": "g", "graph_sha256": "ab", "strategy": "checkpoint-all",
    ...        "backend": None, "status": "optimal", "budget": 8, "peak_memory": 6, "cost": 3.0, "base_cost": 3.0,
    ...        "overhead": 1.0, "lower_bound": 3.0, "gap": 0.0, "host_peak_memory": 0, "host_budget": None,
    ...        "transfer": None, "min_feasible_budget": 4, "smallest_peak": None, "checkpoint_all_peak": 6,
    ...        "solve_time_s": 0.001, "schedule": None, "plan": [], "fallback": None, "log": []}
    >>> result = ResultDocument.from_json(doc)
    >>> result.status, result.peak_memory
    (<ResultStatus.OPTIMAL: 'optimal'>, 6)
    >>> result.to_json() == doc
    True
    """

    graph_name: str
    graph_sha256: str
    strategy: str
    backend: str | None
    status: ResultStatus
    budget: int
    peak_memory: int | None
    cost: float | None
    base_cost: float
    overhead: float | None
    lower_bound: float | None
    gap: float | None
    host_peak_memory: int | None
    host_budget: int | None
    transfer: Transfer | None
    min_feasible_budget: int
    smallest_peak: int | None
    checkpoint_all_peak: int
    solve_time_s: float
    schedule: Mapping[str, Any] | None
    """The Checkmate schedule's JSON (compact or full form); None without one, and in a summary."""
    plan: Sequence[Mapping[str, Any]] | None
    """The remat.plan/v1 steps; None without a plan, and in a summary."""
    fallback: str | None
    log: tuple[str, ...]
    """The solver's last log lines; empty in a summary."""

    @classmethod
    def from_json(cls, doc: Any, *, summary: bool = False) -> ResultDocument:
        """Parse a remat.result/v1, or with ``summary`` one less ``RESULT_BULK``; InvalidResult names the first
        bad field (wrong format, a missing or unknown key, a value of the wrong type)."""
        if not isinstance(doc, Mapping):
            raise InvalidResult(f"A remat.result/v1 must be a JSON object, not {type(doc).__name__}.")
        if doc.get("format") != RESULT_FORMAT:
            raise InvalidResult(f"Not a {RESULT_FORMAT} document: its 'format' is {doc.get('format')!r}.",
                                field="format")
        expected = [k for k in _KINDS if not (summary and k in RESULT_BULK)]
        missing = [k for k in expected if k not in doc]
        if missing:
            raise InvalidResult(f"The {RESULT_FORMAT} document lacks {', '.join(map(repr, missing))}.",
                                field=missing[0])
        unknown = [k for k in doc if k != "format" and k not in expected]
        if unknown:
            raise InvalidResult(f"Unknown field {unknown[0]!r} in a {RESULT_FORMAT} document.", field=unknown[0])
        for key in expected:
            _check(key, doc[key])
        values = {k: doc[k] for k in expected}
        values["status"] = _status(doc["status"])
        values["transfer"] = _transfer(doc["transfer"])
        values["log"] = tuple(doc.get("log", ()))
        return cls(**{"schedule": None, "plan": None, **values})

    def summary(self) -> ResultDocument:
        """This result less ``RESULT_BULK`` (schedule and plan None, no log): what lists and charts need."""
        return replace(self, schedule=None, plan=None, log=())

    def to_json(self, *, summary: bool = False) -> dict[str, Any]:
        """The remat.result/v1 dict, keys in the documented order; with ``summary``, less ``RESULT_BULK``."""
        doc: dict[str, Any] = {"format": RESULT_FORMAT}
        for f in fields(self):
            if summary and f.name in RESULT_BULK:
                continue
            value = getattr(self, f.name)
            if f.name == "status":
                value = value.value
            elif f.name == "transfer":
                value = None if value is None else value.to_json()
            elif f.name == "log":
                value = list(value)
            doc[f.name] = value
        return doc


_STR, _INT, _NUMBER = (str,), (int,), (int, float)
_KINDS: Final[dict[str, tuple[tuple[type, ...], bool]]] = {
    "graph_name": (_STR, False), "graph_sha256": (_STR, False), "strategy": (_STR, False),
    "backend": (_STR, True), "status": (_STR, False), "budget": (_INT, False), "peak_memory": (_INT, True),
    "cost": (_NUMBER, True), "base_cost": (_NUMBER, False), "overhead": (_NUMBER, True),
    "lower_bound": (_NUMBER, True), "gap": (_NUMBER, True), "host_peak_memory": (_INT, True),
    "host_budget": (_INT, True), "transfer": ((Mapping,), True), "min_feasible_budget": (_INT, False),
    "smallest_peak": (_INT, True), "checkpoint_all_peak": (_INT, False), "solve_time_s": (_NUMBER, False),
    "schedule": ((Mapping,), True), "plan": ((list,), True), "fallback": (_STR, True), "log": ((list,), False),
}
"""Each field of the document (after ``format``, in order): the JSON types it takes and whether it may be null."""


def _check(key: str, value: Any) -> None:
    types, nullable = _KINDS[key]
    if key == "log" and isinstance(value, list) and not all(isinstance(line, str) for line in value):
        raise InvalidResult(f"Field 'log' of a {RESULT_FORMAT} document must be a list of strings.", field=key)
    if (value is None and nullable) or (isinstance(value, types) and not isinstance(value, bool)):
        return
    want = " or ".join(t.__name__ for t in types) + (" or null" if nullable else "")
    raise InvalidResult(f"Field {key!r} of a {RESULT_FORMAT} document must be {want}, not "
                        f"{type(value).__name__}.", field=key)


def _status(value: str) -> ResultStatus:
    try:
        return ResultStatus(value)
    except ValueError:
        known = ", ".join(s.value for s in ResultStatus)
        raise InvalidResult(f"Unknown status {value!r} in a {RESULT_FORMAT} document; it is one of {known}.",
                            field="status") from None


def _transfer(value: Mapping[str, Any] | None) -> Transfer | None:
    try:
        return None if value is None else Transfer.from_json(value)
    except InvalidRequest as e:
        raise InvalidResult(f"Field 'transfer' of a {RESULT_FORMAT} document: {e}", field="transfer") from None
