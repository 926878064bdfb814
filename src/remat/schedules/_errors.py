"""The errors remat raises, one small tree rooted in the lowest layer.

::

    RematError                 anything remat refuses or fails to do
    ├── InvalidGraph           a remat.graph/v1 document breaks the format (names node and field)
    ├── InvalidPlan            a plan breaks the simulator's rules (names step and node)
    ├── InvalidSchedule        an (R, S) schedule is malformed or cannot be executed
    ├── InvalidRequest         a solve request is malformed (budget, strategy options...)
    ├── InvalidResult          a remat.result/v1 document breaks the format (names the field)
    ├── UnknownStrategy        no strategy or backend of that name
    ├── StrategyNotApplicable  the strategy does not apply to this graph (names the offending node)
    ├── BackendUnavailable     the solver engine is not installed or not licensed for this size
    └── SolverFailed           the engine crashed or answered nonsense

Every message is a full sentence a user can act on.
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "InvalidGraph",
    "InvalidPlan",
    "InvalidRequest",
    "InvalidResult",
    "InvalidSchedule",
    "RematError",
    "SolverFailed",
    "StrategyNotApplicable",
    "UnknownStrategy",
]


class RematError(Exception):
    """Base of every error remat raises on purpose."""


class InvalidGraph(RematError):
    """A graph document breaks remat.graph/v1; ``node`` and ``field`` say where."""

    def __init__(self, message: str, *, node: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.field = field


class InvalidPlan(RematError):
    """A plan breaks the simulation rules; ``step`` is its index, ``node`` the node's id."""

    def __init__(self, message: str, *, step: int | None = None, node: str | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.node = node


class InvalidSchedule(RematError):
    """An (R, S) schedule has the wrong shape or cannot be turned into a plan."""

    def __init__(self, message: str, *, stage: int | None = None, node: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.node = node


class InvalidRequest(RematError):
    """A solve request is malformed: ``field`` names the offending parameter."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidResult(RematError):
    """A result document breaks remat.result/v1: ``field`` names the offending key."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnknownStrategy(RematError):
    """No strategy (or backend) is registered under the requested name."""


class StrategyNotApplicable(RematError):
    """The strategy cannot run on this graph, for example a chain-only method on a DAG (``node`` names the
    offending node), or one larger than the strategy handles (``field`` is then ``strategy``)."""

    def __init__(self, message: str, *, node: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.field = field


class BackendUnavailable(RematError):
    """The solver engine is missing, or its licence does not cover a model of this size."""


class SolverFailed(RematError):
    """The solver engine crashed, was killed, or returned an unusable answer."""
