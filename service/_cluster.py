"""Cluster mode: jobs in Redis (:class:`RedisStore`), delivered by RQ to ``remat worker`` processes.

RQ only delivers work: a message carries a job id, and the store stays the source of truth. A
worker claims the job, runs it with the same runner as the embedded executor (one child process
group per solve) and renews its lease while it runs. Every API replica and every worker runs the
same maintenance: the reaper takes back running jobs whose lease ran out (a worker killed in the
middle of a solve) and queues them again or fails them, and queued jobs that have no live RQ
message (an API that died between the two writes, a worker that died before claiming) get one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job as RQJob
from rq.job import JobStatus as RQStatus

from ._child import solver_context
from ._jobs import Job, JobStatus, owner_name
from ._redis import RedisStore
from ._runner import RunnerConfig, run_claimed
from ._settings import Settings

__all__ = ["QueueExecutor", "perform", "run_worker"]

log = logging.getLogger("remat.service")

_WAITING = {RQStatus.QUEUED, RQStatus.STARTED, RQStatus.DEFERRED, RQStatus.SCHEDULED}


class QueueExecutor:
    """Puts queued jobs on the RQ queue ``settings.queue_name`` and keeps store and queue in step."""

    def __init__(self, store: RedisStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.queue = Queue(settings.queue_name, connection=redis.Redis.from_url(settings.queue_url or ""))
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._maintain, name="remat-maintenance", daemon=True)
        self._thread.start()

    def dispatch(self, job: Job) -> None:
        slack_s = 2 * self.settings.cancel_grace_s + self.settings.lease_s + 60
        self.queue.enqueue_call(
            "remat.service._cluster.perform", args=(job.id,), job_id=self.message_id(job),
            timeout=int(job.spec.time_limit_s + slack_s), result_ttl=0, failure_ttl=7 * 86400,
            description=f"remat {job.spec.strategy} {job.id[:12]}")

    def message_id(self, job: Job) -> str:
        """The RQ message for this queuing of the job: a new one each time the job is queued again."""
        return f"{self.queue.name}-{job.id}-{int(job.queued_at * 1000)}"

    def cancel(self, job: Job) -> None:
        if job.status is JobStatus.CANCELLED:
            try:
                RQJob.fetch(self.message_id(job), connection=self.queue.connection).cancel()
            except (NoSuchJobError, InvalidJobOperation, redis.RedisError, ValueError):
                pass  # already taken by a worker (which will find the job cancelled), or cancelled before

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

    def maintain(self) -> None:
        """One maintenance pass: reap lost jobs, give queued jobs without a live message a new one."""
        for job in self.store.reap():
            log.warning("job %s: %s", job.id, job.history[-1])
            self.dispatch(job)
        settled = time.time() - self.settings.lease_s
        in_queue = set(self.queue.get_job_ids())
        for job in self.store.jobs_with_status(JobStatus.QUEUED):
            if job.queued_at < settled and self.message_id(job) not in in_queue and not self._has_message(job):
                log.warning("job %s: queued without a queue message; sending one", job.id)
                self.dispatch(job)

    def _has_message(self, job: Job) -> bool:
        try:
            status = RQJob.fetch(self.message_id(job), connection=self.queue.connection).get_status()
        except NoSuchJobError:
            return False
        return status in _WAITING

    def _maintain(self) -> None:
        while not self._stopping.wait(self.settings.lease_s / 2):
            try:
                self.maintain()
            except Exception:
                log.exception("maintenance: unexpected error; going on")


# -- the worker side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WorkerContext:
    store: RedisStore
    owner: str
    config: RunnerConfig
    stopping: threading.Event


_worker: _WorkerContext | None = None
"""Set by run_worker in the ``remat worker`` process; perform() runs only there."""


def perform(job_id: str) -> str:
    """RQ's entry point for a remat job: claim it and run it here. Returns the job's final status."""
    if _worker is None:
        raise RuntimeError("remat jobs run only in `remat worker` processes")
    job = _worker.store.mark_running(job_id, _worker.owner)
    if job is None:
        log.info("job %s: not queued any more; nothing to do", job_id)
        return "skipped"
    final = run_claimed(_worker.store, job, owner=_worker.owner, config=_worker.config, stopping=_worker.stopping)
    return final.status.value if final is not None else "taken back"


def run_worker(settings: Settings, *, burst: bool = False, name: str | None = None) -> None:
    """Run a ``remat worker``: solve the jobs of ``settings.queue_name`` one at a time until stopped."""
    global _worker
    store = RedisStore.from_url(settings.queue_url or "", prefix=settings.redis_prefix, lease_s=settings.lease_s,
                                max_attempts=settings.max_attempts)
    executor = QueueExecutor(store, settings)
    threads = settings.solver_threads or os.cpu_count() or 1
    config = RunnerConfig(settings.lease_s, settings.cancel_grace_s, threads, solver_context())
    worker = SimpleWorker([executor.queue], connection=executor.queue.connection, name=name)
    _worker = _WorkerContext(executor.store, owner_name(worker.name), config, threading.Event())
    executor.start()
    try:
        worker.work(burst=burst, logging_level=settings.log_level.upper())
    finally:
        executor.close()
        _worker = None
