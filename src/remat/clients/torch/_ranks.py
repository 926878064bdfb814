"""One plan for every rank: ranks of a torch.distributed job that plan the same graph solve it once.

Every rank of a data-parallel job captures the same step and would solve the same graph N times. When a
default process group with several ranks is up, a rank planning a graph claims its cache key in the process
group's key-value store: the first to claim it provides the result (its cached one, or the one it solves) and
posts it there; a later claimant takes the posted result (or uses its own cached one). Ranks whose graphs
differ (a batch of another shape, another pipeline stage) each get their own, and a rank never waits for a
graph no other rank plans: a pipeline's stages plan different graphs at different times. Every rank still
checks the result against its own graph before it follows it (:func:`~._planning.check_result`).

The exchange goes through the store, not the collectives: a plan is made while TorchDynamo compiles, where a
collective would run under the compiler's tensor modes; the store's timeout bounds a rank waiting for a
result another rank is solving.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

__all__ = ["shared_across_ranks"]

T = TypeVar("T")


def shared_across_ranks(key: str, cached: T | None, solve: Callable[[], T]) -> tuple[T, str]:
    """The result for ``key`` and where it came from ("cache", "solved" or "rank K"): ``cached`` when this rank
    has it, else the result of the first rank of the job to plan ``key`` (cached or solved)."""
    if not _several_ranks():
        return (cached, "cache") if cached is not None else (solve(), "solved")
    import torch.distributed as dist

    store, rank = dist.distributed_c10d._get_default_store(), dist.get_rank()
    prefix = f"remat/plans/{key}"
    first = store.add(f"{prefix}/claims", 1) == 1
    if not first:
        if cached is not None:
            return cached, "cache"
        provider, result = pickle.loads(store.get(f"{prefix}/result"))
        if isinstance(result, BaseException):
            raise result
        return result, f"rank {provider}"
    made: T | BaseException
    try:
        made = cached if cached is not None else solve()
    except Exception as e:  # a rank waiting for it raises it too
        made = e
    _put(store, f"{prefix}/result", (rank, made))
    if isinstance(made, BaseException):
        raise made
    return made, "cache" if cached is not None else "solved"


def _put(store: Store, key: str, value: object) -> None:
    """Post ``value`` under ``key``, pickled (the store takes bytes, though torch's stub says str)."""
    store.set(key, pickle.dumps(value))  # type: ignore[arg-type]


def _several_ranks() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() \
        and torch.distributed.get_world_size() > 1
