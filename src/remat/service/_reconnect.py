"""Waiting out a Redis outage: capped exponential backoff, and one log line when it starts and one when it ends.

A ``remat worker`` meets an unreachable Redis in several threads at once (its work loop, its running
job's lease, its maintenance, RQ's command channel). They share one :class:`Outage`, so an outage is
logged once, with what the worker waits for, however many tries fail, and its end once, with its
length; no try logs a traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

__all__ = ["REFUSED", "UNREACHABLE", "Backoff", "Outage", "wait_until_reachable"]

log = logging.getLogger("remat.service")

UNREACHABLE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
"""What redis-py raises while Redis is down or cut off (a refused, reset or timed-out connection)."""
REFUSED: tuple[type[Exception], ...] = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
"""Connection errors no wait mends: Redis answers, but refuses the password or the rights."""


@dataclass(frozen=True)
class Backoff:
    """Delays between tries: ``first_s``, then doubling, never more than ``cap_s``.

    >>> from itertools import islice
    >>> list(islice(Backoff(first_s=0.5, cap_s=3.0).delays(), 5))
    [0.5, 1.0, 2.0, 3.0, 3.0]
    """

    first_s: float = 0.5
    cap_s: float = 5.0

    def delays(self) -> Iterator[float]:
        """The delay before each next try, without end."""
        delay = min(self.first_s, self.cap_s)
        while True:
            yield delay
            delay = min(delay * 2, self.cap_s)


class Outage:
    """One process's view of whether ``what`` (e.g. "Redis at redis://host:6379/0") answers; thread-safe."""

    def __init__(self, what: str, *, waiting: str, backoff: Backoff) -> None:
        self.what, self.waiting, self.backoff = what, waiting, backoff
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, error: BaseException) -> None:
        """A try failed: the first of an outage logs what is unreachable, why, and what the process waits for."""
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        log.warning("%s is unreachable (%s: %s); %s, trying again every %g s at most", self.what,
                    type(error).__name__, error, self.waiting, self.backoff.cap_s)

    def ended(self) -> None:
        """A try succeeded: the end of an outage logs how long it lasted."""
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning("%s is reachable again after %.1f s", self.what, time.monotonic() - since)


def wait_until_reachable(ping: Callable[[], object], outage: Outage, stopping: threading.Event) -> bool:
    """Call ``ping`` until it succeeds, sleeping ``outage.backoff``'s delays between tries; False if ``stopping``
    is set first (any other error, a refused password included, is raised)."""
    delays = outage.backoff.delays()
    while not stopping.is_set():
        try:
            ping()
        except REFUSED:
            raise
        except UNREACHABLE as e:
            outage.failed(e)
            stopping.wait(next(delays))
            continue
        outage.ended()
        return True
    return False
