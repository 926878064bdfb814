"""The embedded executor: a few slots in the API process, each running one solve at a time.

The queue is the store itself (queued jobs, claimed fairly between tokens), so a restart loses
nothing: queued jobs run after it, and a job whose process died is taken back by the reaper at once
(its owner's pid is gone) and queued again or failed.
"""

from __future__ import annotations

import logging
import threading

from ._child import solver_context
from ._jobs import Job, owner_name
from ._maintenance import Chores
from ._runner import RunnerConfig, run_claimed
from ._settings import Settings
from ._sqlite import SqliteStore

__all__ = ["LocalExecutor"]

log = logging.getLogger("remat.service")

IDLE_WAIT_S = 1.0
"""Seconds an idle slot sleeps before it looks at the queue again (a submission wakes it sooner). (docs/tuning.md)"""


class LocalExecutor:
    """``settings.slots`` threads, each claiming the next queued job and supervising its solver child."""

    def __init__(self, store: SqliteStore, settings: Settings) -> None:
        self.store = store
        self.slots = settings.slots
        self.maintain_interval_s = settings.lease_s / 2
        self.config = RunnerConfig(settings.lease_s, settings.cancel_grace_s, settings.threads_per_solve,
                                   settings.max_result_bytes, solver_context())
        self.chores = Chores(store, self.dispatch, settings)
        self._wake = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.chores.run()
        self._threads = [threading.Thread(target=self._slot, args=(owner_name(f"slot{i}"),), name=f"remat-slot{i}",
                                          daemon=True) for i in range(self.slots)]
        self._threads.append(threading.Thread(target=self.chores.loop, args=(self._stopping, self.maintain_interval_s),
                                              name="remat-maintenance", daemon=True))
        for thread in self._threads:
            thread.start()

    def dispatch(self, job: Job) -> None:
        with self._wake:
            self._wake.notify()

    def ready(self) -> bool:
        return not self._stopping.is_set() and all(t.is_alive() for t in self._threads)

    def close(self) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join()
        self.store.close()

    def _slot(self, owner: str) -> None:
        while not self._stopping.is_set():
            try:
                job = self.store.claim_next(owner)
                if job is None:
                    with self._wake:
                        self._wake.wait(IDLE_WAIT_S)
                    continue
                run_claimed(self.store, job, owner=owner, config=self.config, stopping=self._stopping)
                self.chores.job_ended()
            except Exception:
                log.exception("slot %s: unexpected error; going on", owner)
                self._stopping.wait(IDLE_WAIT_S)
