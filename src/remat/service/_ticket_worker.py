"""The RQ worker inside ``remat worker``, made to outlive Redis: an outage ends its work loop, never the process.

RQ's own worker quits (with a traceback) when Redis goes away outside the blocking wait for a ticket.
:class:`TicketWorker` turns an unreachable Redis in any step of its loop (heartbeat, suspension
check, registry cleaning, running a ticket, unregistering) into :class:`QueueLost`, which ends the
loop quietly; :func:`work_through_outages` then waits for Redis with a capped backoff and starts the
loop again under the same name. SIGINT and SIGTERM still stop the worker, during an outage too.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import redis
from rq import SimpleWorker
from rq.exceptions import StopRequested

from ._reconnect import UNREACHABLE, Outage, wait_until_reachable

__all__ = ["QueueLost", "TicketWorker", "work_through_outages"]

log = logging.getLogger("remat.service")

F = TypeVar("F", bound=Callable[..., Any])


class QueueLost(StopRequested):
    """Redis went away under the RQ worker: its work loop ends, and :func:`work_through_outages` waits for Redis."""


def _ends_loop_when_unreachable(method: F) -> F:
    """``method`` of a TicketWorker, raising QueueLost (noted in the worker's outage) where Redis is unreachable."""
    @functools.wraps(method)
    def wrapper(self: TicketWorker, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except UNREACHABLE as e:
            self.lost = True
            self.outage.failed(e)
            raise QueueLost(str(e)) from e
    return wrapper  # type: ignore[return-value]


class TicketWorker(SimpleWorker):
    """An RQ SimpleWorker whose loop ends with QueueLost, not a traceback, when Redis is unreachable."""

    def __init__(self, *args: Any, outage: Outage, stopping: threading.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outage, self.stopping = outage, stopping
        self.lost = False
        """True once Redis was found unreachable: the loop ended because of it, not because it was asked to."""

    heartbeat = _ends_loop_when_unreachable(SimpleWorker.heartbeat)
    check_for_suspension = _ends_loop_when_unreachable(SimpleWorker.check_for_suspension)
    run_maintenance_tasks = _ends_loop_when_unreachable(SimpleWorker.run_maintenance_tasks)
    execute_job = _ends_loop_when_unreachable(SimpleWorker.execute_job)

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT or SIGTERM: RQ's warm shutdown, which needs Redis; without it, the loop ends at once."""
        self.stopping.set()
        try:
            super().request_stop(signum, frame)  # type: ignore[no-untyped-call]
        except UNREACHABLE:
            raise StopRequested() from None

    def teardown(self) -> None:
        """Unregister where Redis answers; stop the thread that listens for RQ's commands in any case."""
        try:
            super().teardown()  # type: ignore[no-untyped-call]
        except UNREACHABLE as e:
            self.outage.failed(e)
            if self.pubsub_thread is not None:
                self.pubsub_thread.stop()
                self.pubsub_thread.join(timeout=1)

    def _pubsub_exception_handler(self, exc: Exception, pubsub: Any, pubsub_thread: Any) -> None:
        """RQ's command channel lost Redis: note it in the outage (no log line per try) and wait before trying again."""
        if not isinstance(exc, UNREACHABLE):
            super()._pubsub_exception_handler(exc, pubsub, pubsub_thread)
            return
        self.outage.failed(exc)
        time.sleep(self.outage.backoff.cap_s)


def work_through_outages(make_worker: Callable[[str], TicketWorker], connection: redis.Redis, *, name: str | None,
                         burst: bool, logging_level: str, outage: Outage, stopping: threading.Event) -> None:
    """Run ``make_worker(name)``'s loop until it is asked to stop (or, with ``burst``, empties the queue): whenever
    Redis is unreachable, at start or later, wait for it (``outage``'s backoff) and start the loop again."""
    name = name or uuid.uuid4().hex
    previous: TicketWorker | None = None
    while True:
        _stop_on_signals(stopping)
        if not wait_until_reachable(functools.partial(_take_back_name, connection, previous), outage, stopping):
            return
        worker = previous = make_worker(name)
        try:
            worker.work(burst=burst, logging_level=logging_level)
        except UNREACHABLE as e:  # while it registered itself
            worker.lost = True
            outage.failed(e)
            worker.teardown()
        if not worker.lost or stopping.is_set():
            return
        log.info("worker %s: its loop ended for want of Redis; it starts again once Redis answers", name)


def _take_back_name(connection: redis.Redis, previous: TicketWorker | None) -> None:
    """Ping Redis, and remove the registration the worker that lost it could not remove, so that the worker
    can register again under its name (RQ refuses a name that a live registration holds)."""
    connection.ping()
    if previous is not None:
        previous.register_death()  # type: ignore[no-untyped-call]


def _stop_on_signals(stopping: threading.Event) -> None:
    """Between two runs of the loop (RQ's own handlers need Redis), SIGINT and SIGTERM set ``stopping``."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stopping.set())
