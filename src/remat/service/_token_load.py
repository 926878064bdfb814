"""What a token holds against its caps: its queued or running jobs, and the slots its max-batch searches hold.

A max-batch search solves one batch per strategy at a time, each an ordinary job the executors' maintenance
submits once the previous batch has ended (:mod:`._max_batch_steps`). So that those later batches count against
the token's ``max_active_jobs_per_token`` like any job it starts, each strategy still searching *holds a slot*
from admission until it ends: the slot is its batch's job while that job is queued or running, and a held
slot between two batches. Admission counts both (:func:`token_load`), so a search never waits for room it was
promised, and the maintenance submits a batch only while the token's queued and running jobs stay within the
cap (:func:`room_for_jobs`), so no race and no lowered cap lets a token exceed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._max_batches import MaxBatchSearch
from ._store import JobStore

__all__ = ["TokenLoad", "held_slots", "room_for_jobs", "token_load"]


@dataclass(frozen=True)
class TokenLoad:
    """A token's share in use: ``active_jobs`` queued or running, ``held_slots`` kept by its searches between
    batches, ``searches`` max-batch searches going on."""

    active_jobs: int
    held_slots: int
    searches: int

    @property
    def slots(self) -> int:
        """Slots of ``max_active_jobs_per_token`` in use: the active jobs and the held slots."""
        return self.active_jobs + self.held_slots


def held_slots(store: JobStore, searches: Sequence[MaxBatchSearch]) -> int:
    """Strategies of ``searches`` still searching whose batch has no queued or running job (between batches)."""
    pending = {t.job_id for s in searches for t in (x.pending for x in s.strategies if not x.ended) if t}
    active = {j.id for j in store.get_many(sorted(pending)) if not j.status.terminal}
    return sum(1 for s in searches for x in s.strategies
               if not x.ended and (x.pending is None or x.pending.job_id not in active))


def token_load(store: JobStore, token: str | None) -> TokenLoad:
    """``token``'s queued or running jobs, the slots its searches hold, and its searches going on."""
    searches = [s for s in store.active_max_batches() if s.token == token]
    return TokenLoad(store.count_active(token), held_slots(store, searches), len(searches))


def room_for_jobs(store: JobStore, token: str | None, cap: int) -> int:
    """How many more jobs ``token`` may have queued or running under ``cap``."""
    return max(0, cap - store.count_active(token))
