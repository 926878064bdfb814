"""What the API needs from whatever runs its jobs, and the choice between the two executors."""

from __future__ import annotations

from typing import Protocol

from ._jobs import Job
from ._settings import Settings
from ._store import JobStore

__all__ = ["STORE_FILE", "Executor", "open_executor"]

STORE_FILE = "jobs.sqlite3"
"""The embedded job store's file, in the data directory."""


class Executor(Protocol):
    """Runs the jobs of one store: the embedded slots, or the RQ queue in front of ``remat worker``s."""

    @property
    def store(self) -> JobStore:
        """The store whose jobs it runs."""

    def start(self) -> None:
        """Begin running jobs (and recover those a previous process left behind)."""

    def dispatch(self, job: Job) -> None:
        """A job has (again) become queued: make sure something will run it (a cancelled job never runs:
        runners claim only queued jobs, and a running one stops by itself)."""

    def ready(self) -> bool:
        """True while jobs can be accepted and run."""

    def close(self) -> None:
        """Stop: the embedded executor kills its running solves and queues their jobs again; the queue
        executor stops its own threads only (its workers are separate processes)."""


def open_executor(settings: Settings) -> Executor:
    """The embedded executor with its SQLite store, or the RQ executor with its Redis store (``queue_url``)."""
    policy = {"lease_s": settings.lease_s, "max_attempts": settings.max_attempts,
              "share_results": settings.share_results}
    if settings.queue_url:
        from ._cluster import QueueExecutor
        from ._redis import RedisStore

        return QueueExecutor(RedisStore.from_url(settings.queue_url, prefix=settings.redis_prefix, **policy), settings)
    from ._local import LocalExecutor
    from ._sqlite import SqliteStore

    return LocalExecutor(SqliteStore(settings.data_dir / STORE_FILE, **policy), settings)
