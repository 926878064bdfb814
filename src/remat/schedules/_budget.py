"""Memory budgets: sizes written with units, and budgets given in bytes or as a ratio."""

from __future__ import annotations

import math
import re

from ._errors import InvalidRequest
from ._graph import MAX_TOTAL_BYTES, Graph

__all__ = ["BINARY_UNITS", "MAX_BUDGET_RATIO", "byte_unit", "format_size", "parse_size", "resolve_budget"]

MAX_BUDGET_RATIO = 1000.0
"""Largest ``budget_ratio`` accepted: far above any useful budget, low enough that no budget overflows."""

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
BINARY_UNITS = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
"""The binary units sizes are shown in, largest first, with their sizes in bytes."""
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: a whole number or a number with a unit (``12GiB``, ``1.5 GB``, ``800MiB``).

    >>> parse_size("12GiB"), parse_size("1.5kB"), parse_size(42)
    (12884901888, 1500, 42)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return _bytes(text, text)
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise InvalidRequest(
            f"Cannot read {text!r} as a size: write bytes or a number with a unit such as 12GiB, 800MB.",
            field="budget",
        )
    return _bytes(float(m.group(1)) * _UNITS[unit], text)


def _bytes(value: float, text: str | int) -> int:
    """``value`` as whole bytes; InvalidRequest quoting ``text`` when it is negative or too large to count."""
    if value < 0:
        raise InvalidRequest(f"A size must be >= 0, got {text}.", field="budget")
    if not value <= MAX_TOTAL_BYTES:
        raise InvalidRequest(f"A size must be at most {MAX_TOTAL_BYTES} bytes, got {text}.", field="budget")
    return int(math.floor(value))


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit a size (or an axis reaching it) reads best in, and its size in bytes.

    >>> byte_unit(3 * 2**30), byte_unit(512)
    (('GiB', 1073741824), ('B', 1))
    """
    return next(((unit, scale) for unit, scale in BINARY_UNITS if largest >= scale), ("B", 1))


def format_size(n: float) -> str:
    """Bytes in binary units for people: ``format_size(3 * 2**30) == '3.00 GiB'``."""
    unit, scale = byte_unit(abs(n))
    return f"{int(n)} B" if scale == 1 else f"{n / scale:.2f} {unit}"


def resolve_budget(graph: Graph, *, budget: int | None = None, budget_ratio: float | None = None) -> int:
    """The budget in bytes (fixed memory included): ``budget``, or ceil(ratio * checkpoint-all peak)."""
    if (budget is None) == (budget_ratio is None):
        raise InvalidRequest("Give exactly one of 'budget' (bytes) and 'budget_ratio'.", field="budget")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or not 0 <= budget <= MAX_TOTAL_BYTES:
            raise InvalidRequest(f"'budget' must be a whole number of bytes in [0, {MAX_TOTAL_BYTES}], got {budget!r}.",
                                 field="budget")
        return budget
    assert budget_ratio is not None
    if isinstance(budget_ratio, bool) or not isinstance(budget_ratio, (int, float)) \
            or not 0 < budget_ratio <= MAX_BUDGET_RATIO:
        raise InvalidRequest(f"'budget_ratio' must be a number in (0, {MAX_BUDGET_RATIO:g}], got {budget_ratio!r}.",
                             field="budget_ratio")
    return math.ceil(budget_ratio * graph.checkpoint_all_peak)
