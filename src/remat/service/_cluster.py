"""Cluster mode: jobs in Redis (:class:`RedisStore`), run by ``remat worker`` processes that RQ wakes.

RQ only delivers tickets: a message says "claim the next job", nothing else, and the store stays the
source of truth (and chooses the job, fairly between tokens). A ticket is data, never code: messages
are JSON (RQ's JSONSerializer, so nothing is unpickled, in the API or in a worker), and a worker
runs one only when it names :func:`perform` without arguments (:class:`Ticket`); any other message,
pickled or naming another function, callbacks or webhooks, is refused without running anything.

A worker claims a job, runs it with the same runner as the embedded executor (one child process
group per solve) and renews its lease while it runs. Every API replica and every worker runs the
same maintenance (:class:`~remat.service._maintenance.Chores`), and the queue executor also sends
tickets for queued jobs that have none (an API that died between the two writes).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import redis
from rq import Queue
from rq.job import Job as RQJob
from rq.serializers import JSONSerializer

from remat.schedules import RematError

from ._child import solver_context
from ._jobs import Job, JobStatus, owner_name
from ._maintenance import Chores
from ._reconnect import Backoff, Outage
from ._redis import RedisStore
from ._runner import RunnerConfig, run_claimed
from ._settings import Settings
from ._ticket_worker import TicketWorker, work_through_outages
from ._urls import redacted

__all__ = ["PERFORM", "QueueExecutor", "Ticket", "perform", "run_worker"]

log = logging.getLogger("remat.service")

PERFORM = "remat.service._cluster.perform"
"""The one function a ticket may name."""
TICKET_SLACK_S = 300
"""Seconds RQ allows a ticket beyond the longest solve before it gives up on its worker. (docs/tuning.md)"""


class ForeignMessage(RematError):
    """An RQ message that is not a remat ticket: it is refused, never run."""


class Ticket(RQJob):
    """An RQ message as remat reads one: a ticket to claim the next job, and nothing RQ could run instead.

    ``func`` resolves only :data:`PERFORM` called without arguments (ForeignMessage otherwise, which
    RQ records as the message's failure); the callbacks RQ would import by name are never looked up and
    webhooks are never sent, whatever the message's hash says.
    """

    @property
    def func(self) -> Any:
        if self.func_name != PERFORM or self.instance is not None or self.args or self.kwargs:
            raise ForeignMessage(f"RQ message {self.id!r} is not a remat ticket; refused without running it.")
        return perform

    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None

    def send_webhooks(self, *args: Any, **kwargs: Any) -> None:
        """Never: a message's webhooks are not remat's."""


def ticket_queue(settings: Settings) -> Queue:
    """The RQ queue of ``settings``, reading and writing JSON tickets only."""
    connection = redis.Redis.from_url(settings.queue_url or "")
    return Queue(settings.queue_name, connection=connection, serializer=JSONSerializer, job_class=Ticket)


class QueueExecutor:
    """Sends a ticket for every job that becomes queued, and runs the maintenance of ``store``; ``waiting`` says
    what this process does while Redis is unreachable (logged once per outage)."""

    def __init__(self, store: RedisStore, settings: Settings, *,
                 waiting: str = "maintenance waits for it and the API answers 503") -> None:
        self.store = store
        self.settings = settings
        self.queue = ticket_queue(settings)
        self.outage = Outage(f"Redis at {redacted(settings.queue_url)}", waiting=waiting,
                             backoff=Backoff(cap_s=settings.reconnect_max_wait_s))
        self.chores = Chores(store, self.dispatch, settings)
        self._short = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.chores.loop, name="remat-maintenance", daemon=True,
                                        args=(self._stopping, self.settings.lease_s / 2, self.send_missing_tickets,
                                              self.outage))
        self._thread.start()

    def dispatch(self, job: Job) -> None:
        self._send_ticket()

    def _send_ticket(self) -> None:
        self.queue.enqueue_call(PERFORM, timeout=int(self.settings.max_time_limit_s + TICKET_SLACK_S),
                                result_ttl=0, failure_ttl=86400, description="remat ticket")

    def send_missing_tickets(self) -> None:
        """Queued jobs outnumber waiting tickets on two passes in a row: send the difference (a ticket taken
        by a worker that has not yet claimed its job makes the count dip for a moment, not for two passes)."""
        short = self.store.count(JobStatus.QUEUED) - self.queue.count
        missing = min(short, self._short)
        if missing > 0:
            log.warning("%d queued jobs had no ticket; sending one each", missing)
            for _ in range(missing):
                self._send_ticket()
        self._short = max(short, 0)

    def ready(self) -> bool:
        try:
            self.queue.connection.ping()
            self.store.ping()
        except redis.RedisError:
            return False
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self.queue.connection.close()
        self.store.close()


# -- the worker side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WorkerContext:
    store: RedisStore
    owner: str
    config: RunnerConfig
    stopping: threading.Event
    chores: Chores


_worker: _WorkerContext | None = None
"""Set by run_worker in the ``remat worker`` process; perform() runs only there."""


def perform() -> str:
    """A ticket's work: claim the next queued job and run it here. Returns the job's final status."""
    if _worker is None:
        raise RuntimeError("remat jobs run only in `remat worker` processes")
    job = _worker.store.claim_next(_worker.owner)
    if job is None:
        return "idle"
    final = run_claimed(_worker.store, job, owner=_worker.owner, config=_worker.config, stopping=_worker.stopping)
    _worker.chores.job_ended()
    return final.status.value if final is not None else "taken back"


def run_worker(settings: Settings, *, burst: bool = False, name: str | None = None) -> None:
    """Run a ``remat worker``: solve the jobs of ``settings.queue_name`` one at a time until stopped, waiting out
    every Redis outage (at start too) instead of exiting."""
    global _worker
    store = RedisStore.from_url(settings.queue_url or "", prefix=settings.redis_prefix, lease_s=settings.lease_s,
                                max_attempts=settings.max_attempts, share_results=settings.share_results)
    executor = QueueExecutor(store, settings, waiting="the worker waits for it before it takes another job (a "
                                                      "running solve goes on)")
    threads = settings.solver_threads or os.cpu_count() or 1
    config = RunnerConfig(settings.lease_s, settings.cancel_grace_s, threads, settings.max_result_bytes,
                          solver_context())
    stopping = threading.Event()

    def make_worker(worker_name: str) -> TicketWorker:
        return TicketWorker([executor.queue], connection=executor.queue.connection, name=worker_name,
                            serializer=JSONSerializer, job_class=Ticket, outage=executor.outage, stopping=stopping)

    name = name or uuid.uuid4().hex
    _worker = _WorkerContext(executor.store, owner_name(name), config, threading.Event(), executor.chores)
    executor.start()
    try:
        work_through_outages(make_worker, executor.queue.connection, name=name, burst=burst,
                             logging_level=settings.log_level.upper(), outage=executor.outage, stopping=stopping)
    finally:
        executor.close()
        _worker = None
