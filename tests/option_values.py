"""Every option of every strategy, with values it accepts and values it refuses: shared by the solver's
option tests and the service's admission tests."""

from __future__ import annotations

from typing import Any

from remat.solvers import STRATEGIES, Option, OptionKind, Strategy

OPTIONS: list[tuple[Strategy, str, Option]] = [
    (s, name, option) for s in STRATEGIES.values() for name, option in s.options.items()]
"""(strategy, option name, option) for each option any strategy declares."""
OPTION_IDS = [f"{s.name}.{name}" for s, name, _ in OPTIONS]
"""A test id for each entry of :data:`OPTIONS`."""


def good_values(option: Option) -> list[Any]:
    """Values ``option`` accepts, its bounds included."""
    if option.kind is OptionKind.FLAG:
        return [True, False]
    if option.kind is OptionKind.CHOICE:
        return list(option.choices)
    return [option.least, option.least + 1, *([option.most] if option.most is not None else [])]


def bad_values(option: Option) -> list[Any]:
    """Values ``option`` refuses: of another kind, out of its range, or not among its choices."""
    if option.kind is OptionKind.FLAG:
        return ["yes", 1, 0.0, "true"]
    if option.kind is OptionKind.CHOICE:
        return ["bogus", 1, True, option.choices[0].upper()]
    return [option.least - 1, 1.5, True, "3", *([option.most + 1] if option.most is not None else [])]
