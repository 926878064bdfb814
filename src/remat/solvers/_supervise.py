"""Stopping a child process in two steps: ask it to stop, then kill it when it has not ended in time.

Three places run work in a child (:func:`remat.solvers.spawn`) and stop it this way:
:func:`remat.solvers.backends.run_backend` (an engine's solver process), the checkmate strategy's
``anneal`` helpers, and the service's job runner (a whole solve). Each builds a :class:`StopThenKill`
from how to ask its child to stop and how to kill it; the timing constants below are the only ones.

The periods nest: a solve stops its engines and helpers within :data:`GRACE_S`, then simulates its
plan and sends it, so the service gives a whole solve :data:`SOLVE_GRACE_S`, which is longer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ._context import StopReason

__all__ = ["DEADLINE_SLACK_S", "GRACE_S", "SOLVE_GRACE_S", "StopThenKill"]

GRACE_S = 1.5
"""Seconds a child running an engine or a helper gets, once asked to stop, before it is killed. (docs/tuning.md)"""

DEADLINE_SLACK_S = 1.0
"""Seconds past its own time limit after which an engine's process is asked to stop. (docs/tuning.md)"""

SOLVE_GRACE_S = 5.0
"""Seconds a whole solve gets, once asked to stop, to return its best plan before it is killed (the
service's default ``cancel_grace_s``; it covers the solve's own :data:`GRACE_S`). (docs/tuning.md)"""


@dataclass
class StopThenKill:
    """One child's stop: ``ask`` it (once, with the reason) and ``kill`` it ``grace_s`` later if still needed.

    ``deadline`` (a :func:`time.monotonic` time) is when :meth:`tend` asks for a stop with
    :attr:`StopReason.DEADLINE`; :meth:`within` sets it from a time limit.

    >>> asked = []
    >>> child = StopThenKill(asked.append, kill=lambda: asked.append("killed"), grace_s=1.0)
    >>> child.stop(StopReason.CANCEL), child.stop(StopReason.DEADLINE), child.reason.value
    (True, False, 'cancel')
    >>> child.tend(now=child.asked_at + 0.5), child.tend(now=child.asked_at + 1.5), asked
    (False, True, [<StopReason.CANCEL: 'cancel'>, 'killed'])
    """

    ask: Callable[[StopReason | None], object]
    """Asks the child to stop, for the reason given (None: its work is no longer needed)."""
    kill: Callable[[], object]
    grace_s: float = GRACE_S
    deadline: float = math.inf
    asked_at: float | None = None
    """When the child was asked to stop (None while it was not)."""
    reason: StopReason | None = None

    @classmethod
    def within(cls, time_limit_s: float, ask: Callable[[StopReason | None], object], kill: Callable[[], object], *,
               grace_s: float = GRACE_S, slack_s: float = DEADLINE_SLACK_S) -> StopThenKill:
        """A stop for a child that should end within ``time_limit_s`` from now: it is asked to stop
        ``slack_s`` after that."""
        return cls(ask, kill, grace_s, deadline=time.monotonic() + time_limit_s + slack_s)

    def stop(self, reason: StopReason | None = None) -> bool:
        """Ask the child to stop for ``reason``; only the first call asks (True when this one did)."""
        if self.asked_at is not None:
            return False
        self.asked_at, self.reason = time.monotonic(), reason
        self.ask(reason)
        return True

    def overdue(self, now: float | None = None) -> bool:
        """True when the child was asked to stop more than ``grace_s`` ago."""
        return self.asked_at is not None and _now(now) > self.asked_at + self.grace_s

    def grace_left(self, now: float | None = None) -> float:
        """Seconds left of the grace period (all of it before the child is asked, none once it is overdue)."""
        return self.grace_s if self.asked_at is None else max(0.0, self.asked_at + self.grace_s - _now(now))

    def tend(self, now: float | None = None) -> bool:
        """Ask for a stop once the deadline has passed, and kill the child once it is overdue; True when it killed."""
        now = _now(now)
        if now > self.deadline:
            self.stop(StopReason.DEADLINE)
        if not self.overdue(now):
            return False
        self.kill()
        return True


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
