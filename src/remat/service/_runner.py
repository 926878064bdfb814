"""Running one claimed job: solve it in a child process group, keep the lease, record how it ended.

The same runner serves the embedded executor's slots and ``remat worker``. It renews the job's
lease, stores the solver's progress, turns a cancel request (or an overrun of the time limit) into
a stop that carries its reason (the solve's result then says how it ended) and, after the grace
period, SIGKILL to the solver's group, and catches every failure at
the job boundary so that a bad job never takes the runner down. While the store is unreachable (Redis
down) the solve goes on: the lease is renewed when the store answers again, and the job's end is
written then (unless the job was taken back meanwhile, which the next write finds out).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from typing import Any

from remat.solvers import Child, ChildFailed, Progress, StopReason, StopThenKill

from ._child import JobError, Solved, start_solve
from ._jobs import Claim, Job
from ._reconnect import UNREACHABLE, Backoff
from ._store import JobStore

__all__ = ["RunnerConfig", "run_claimed"]

log = logging.getLogger("remat.service")

POLL_S = 0.1
"""Seconds between two looks at the solver's pipe. (docs/tuning.md)"""
CONTROL_INTERVAL_S = 0.25
"""Seconds between two reads of the job's cancel flag. (docs/tuning.md)"""
PROGRESS_INTERVAL_S = 0.5
"""Least seconds between two progress writes to the store. (docs/tuning.md)"""


@dataclass(frozen=True)
class RunnerConfig:
    """What a runner needs besides the job: lease, grace period, threads, result size cap, where children come from."""

    lease_s: float
    cancel_grace_s: float
    threads: int
    max_result_bytes: int
    ctx: ForkServerContext
    reconnect_max_wait_s: float = 5.0


def run_claimed(store: JobStore, job: Job, *, owner: str, config: RunnerConfig,
                stopping: threading.Event) -> Job | None:
    """Run a job that ``owner`` has claimed until it ends; returns its final record (None: it was taken back).

    When ``stopping`` is set (the service shuts down) the solve is killed and the job queued again.
    """
    by = Claim(job.id, owner, job.attempts)
    log.info("job %s: attempt %d on %s (%s, budget %d)", job.id, by.attempt, owner, job.spec.strategy,
             job.spec.budget)
    try:
        child = start_solve(job.spec, store.get_graph(job.spec.graph_sha256), threads=config.threads,
                            max_result_bytes=config.max_result_bytes, ctx=config.ctx)
    except Exception as e:
        log.exception("job %s: could not start its solver", job.id)
        return store.mark_failed(by, f"could not start the solver process: {e}")
    try:
        return _Supervisor(store, by, job, child, config, stopping).run()
    except Exception as e:
        log.exception("job %s: the runner failed", job.id)
        child.kill()
        return store.mark_failed(by, f"the runner failed with an unexpected error ({type(e).__name__}); "
                                     f"the server log has the details")
    except BaseException:
        child.kill()
        _release_quietly(store, by)
        raise
    finally:
        child.close()


def _release_quietly(store: JobStore, by: Claim) -> None:
    try:
        store.release(by)
    except Exception:
        log.warning("job %s: could not put it back in the queue; the reaper will", by.job_id)


class _Supervisor:
    """The loop that watches one solver child: messages, lease, cancel, deadline, kill."""

    def __init__(self, store: JobStore, by: Claim, job: Job, child: Child, config: RunnerConfig,
                 stopping: threading.Event) -> None:
        self.store, self.by, self.job, self.child, self.config, self.stopping = store, by, job, child, config, stopping
        self.stopper = StopThenKill.within(job.spec.time_limit_s, self._ask_to_stop, lambda: child.kill(),
                                           grace_s=config.cancel_grace_s, slack_s=config.cancel_grace_s)
        self.renewed = self.controlled = time.monotonic()
        self.progress: dict[str, Any] | None = None
        self.progress_written = True
        self.store_down = False

    def run(self) -> Job | None:
        if self._write(lambda: self.store.renew(self.by, solver_pid=self.child.pid)) is None:
            self.child.kill()
            return None
        while self.child.alive():
            for message in self.child.receive(POLL_S):
                if not isinstance(message, Progress):
                    return self._record(message)
                self.progress, self.progress_written = message.to_json(), False
            if self.stopping.is_set():
                self.child.kill()
                log.info("job %s: shutting down; queued again", self.by.job_id)
                _release_quietly(self.store, self.by)
                return None
            if not self._keep_lease():
                self.child.kill()
                log.warning("job %s: the claim of attempt %d was taken back; solve stopped", self.by.job_id,
                            self.by.attempt)
                return None
            self.stopper.tend()
        return self._record(None)

    def _keep_lease(self) -> bool:
        """Renew the lease (with progress) and read the cancel flag when due; False if the claim is lost (an
        unreachable store is tried again at the next renewal, the solve going on meanwhile)."""
        try:
            kept = self._renew_and_control()
        except UNREACHABLE as e:
            self.renewed = self.controlled = time.monotonic()
            self._store_unreachable(e)
            return True
        self._store_reachable()
        return kept

    def _renew_and_control(self) -> bool:
        now = time.monotonic()
        renew_due = now - self.renewed >= self.config.lease_s / 5
        progress_due = not self.progress_written and now - self.renewed >= PROGRESS_INTERVAL_S
        if renew_due or progress_due:
            current = self.store.renew(self.by, progress=self.progress)
            self.renewed, self.progress_written = now, True
            if current is None:
                return False
            cancelled = current.cancel_requested
        elif now - self.controlled >= CONTROL_INTERVAL_S:
            self.controlled = now
            cancelled = self.store.get(self.by.job_id, with_result=False).cancel_requested
        else:
            cancelled = False
        if cancelled:
            self.stopper.stop(StopReason.CANCEL)
        return True

    def _ask_to_stop(self, reason: StopReason | None) -> None:
        assert reason is not None
        log.info("job %s: %s; asking the solver to stop", self.by.job_id, reason.value)
        self.child.stop(reason)

    def _store_unreachable(self, error: Exception) -> None:
        if not self.store_down:
            log.warning("job %s: the job store is unreachable (%s); the solve goes on, and its lease is renewed "
                        "once the store answers", self.by.job_id, type(error).__name__)
        self.store_down = True

    def _store_reachable(self) -> None:
        if self.store_down:
            log.info("job %s: the job store answers again", self.by.job_id)
        self.store_down = False

    def _write(self, write: Callable[[], Job | None]) -> Job | None:
        """``write()``, tried again with a capped backoff while the store is unreachable, so that no job's end
        is dropped for want of the store (raised as it is once the runner is asked to stop)."""
        delays = Backoff(cap_s=self.config.reconnect_max_wait_s).delays()
        while True:
            try:
                written = write()
            except UNREACHABLE as e:
                self._store_unreachable(e)
                if self.stopping.wait(next(delays)):
                    raise
                continue
            self._store_reachable()
            return written

    def _record(self, message: Solved | JobError | ChildFailed | None) -> Job | None:
        """Log how the solve ended and write it to the store (waiting for the store, if need be)."""
        by = self.by
        if isinstance(message, Solved):
            result = message.result
            job = self._write(lambda: self.store.mark_finished(by, result))
            log.info("job %s: %s (%s)", by.job_id, job.status.value if job else "claim lost", result.status.value)
            return job
        if isinstance(message, ChildFailed):
            log.error("job %s: the solver crashed:\n%s", by.job_id, message.traceback)
            error = f"the solver failed with an unexpected error ({message.name}); the server log has the details"
        elif message is not None:
            log.warning("job %s: the solve failed: %s", by.job_id, message.error)
            error = message.error
        else:
            self.child.wait(1.0)
            error = self._death_reason()
            log.warning("job %s: %s", by.job_id, error)
        cancelled = message is None and self.stopper.reason is StopReason.CANCEL
        return self._write(lambda: self.store.mark_failed(by, error, cancelled=cancelled))

    def _death_reason(self) -> str:
        code = self.child.exitcode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        if self.stopper.reason is StopReason.CANCEL:
            return f"cancelled; the solver did not return a plan within {self.config.cancel_grace_s:g} s and was killed"
        if self.stopper.reason is StopReason.DEADLINE:
            return f"the solver ran past its time limit of {self.job.spec.time_limit_s:g} s and was killed"
        return f"the solver process ended without a result ({how})"
