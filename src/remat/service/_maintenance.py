"""The chores every executor runs beside its solves: take back lost jobs, complete sweeps, step max-batch
searches, expire old records.

Every API replica and every worker runs them (each step is safe to run in several processes at once):
the reaper queues again, or fails, running jobs whose runner is gone; sweeps get their natural points
once the heuristics' unconstrained runs have ended; max-batch searches get their next batches (also
as soon as a job ends, :meth:`Chores.job_ended`); and, every ``expire_interval_s``, what the
retention settings no longer keep is deleted, so the store does not grow without end. Each pass
ends by touching the heartbeat file, which ``remat healthcheck`` reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from remat.schedules import RematError

from ._jobs import Job
from ._max_batch_steps import advance_max_batches
from ._reconnect import UNREACHABLE, Outage
from ._settings import Settings
from ._store import JobStore
from ._sweep_completion import complete_sweeps

__all__ = ["Chores", "check_heartbeat"]

log = logging.getLogger("remat.service")


class Chores:
    """One executor's maintenance over ``store``; ``dispatch`` makes sure a job queued (again) will run."""

    def __init__(self, store: JobStore, dispatch: Callable[[Job], None], settings: Settings) -> None:
        self.store = store
        self.dispatch = dispatch
        self.retention = settings.retention
        self.graph_limits = settings.graph_limits
        self.max_active_jobs_per_token = settings.max_active_jobs_per_token
        self.expire_interval_s = settings.expire_interval_s
        self.heartbeat_file = settings.heartbeat_file
        self._expired_at = -float("inf")

    def run(self) -> None:
        """One pass: migrate (once), reap, complete sweeps, step max-batch searches, and expire when it is due."""
        self.store.migrate()
        for job in self.store.reap():
            log.warning("job %s: %s", job.id, job.history[-1])
            self.dispatch(job)
        complete_sweeps(self.store, self.dispatch, max_active_jobs_per_token=self.max_active_jobs_per_token)
        advance_max_batches(self.store, self.dispatch, self.graph_limits,
                                max_active_jobs_per_token=self.max_active_jobs_per_token)
        if time.monotonic() - self._expired_at >= self.expire_interval_s:
            self._expired_at = time.monotonic()
            expired = self.store.expire(self.retention)
            if expired.jobs or expired.sweeps or expired.graphs or expired.max_batches:
                log.info("retention: %d jobs, %d sweeps, %d max-batch searches and %d graphs deleted", expired.jobs,
                         expired.sweeps, expired.max_batches, expired.graphs)
        if self.heartbeat_file is not None:
            self.heartbeat_file.touch()

    def job_ended(self) -> None:
        """A runner's job has ended: give the max-batch searches waiting on it their next batch now (an error is
        logged, not raised: the next pass tries again)."""
        try:
            advance_max_batches(self.store, self.dispatch, self.graph_limits,
                                max_active_jobs_per_token=self.max_active_jobs_per_token)
        except Exception:
            log.exception("max-batch searches: unexpected error; the next pass tries again")

    def loop(self, stopping: threading.Event, interval_s: float, also: Callable[[], None] | None = None,
             outage: Outage | None = None) -> None:
        """``run`` (then ``also``) every ``interval_s`` until ``stopping`` is set; an error is logged, not fatal (an
        unreachable Redis only in ``outage``, once per outage, where one is given)."""
        while not stopping.wait(interval_s):
            try:
                self.run()
                if also is not None:
                    also()
            except Exception as e:
                if outage is not None and isinstance(e, UNREACHABLE):
                    outage.failed(e)
                    continue
                log.exception("maintenance: unexpected error; going on")
            if outage is not None:
                outage.ended()


def check_heartbeat(path: Path | None, *, max_age_s: float) -> float:
    """The heartbeat file's age in seconds; RematError when it is missing, unset or older than ``max_age_s``."""
    if path is None:
        raise RematError("No heartbeat file is set (REMAT_HEARTBEAT_FILE): nothing to check.")
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        raise RematError(f"Unhealthy: {path} does not exist (maintenance has not run yet).") from None
    if age > max_age_s:
        raise RematError(f"Unhealthy: the last maintenance pass was {age:.0f} s ago (more than {max_age_s:g} s).")
    return age
