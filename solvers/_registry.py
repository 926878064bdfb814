"""The one table of strategies: the CLI, the service and the dashboard all list from here."""

from __future__ import annotations

from remat.schedules import UnknownStrategy

from ._checkpoint import checkpoint_all, checkpoint_last
from ._strategy import Strategy

__all__ = ["STRATEGIES", "get_strategy"]

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("checkpoint-all", "No rematerialization: every value kept until its last use.", checkpoint_all),
        Strategy("checkpoint-last", "Minimum-memory baseline: keep only the newest value, recompute the rest.",
                 checkpoint_last),
    )
}


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; UnknownStrategy lists the valid names otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UnknownStrategy(
            f"Unknown strategy {name!r}; choose one of: {', '.join(STRATEGIES)}."
        ) from None
