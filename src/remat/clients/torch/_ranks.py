"""One plan for every rank: ranks of a torch.distributed job that plan the same graph solve it once.

Every rank of a data-parallel job captures the same step and would solve the same graph N times. When a
default process group with several ranks is up, the ranks planning a graph post what they plan (its cache
key) and whether their plan cache holds it; for each key, the lowest rank that has it cached (else the
lowest rank with that key) provides the result, and the others take it. Ranks whose graphs differ (a batch
of another shape) each get their own. Every rank still checks the result against its own graph before it
follows it (:func:`~._planning.check_result`).

The exchange goes through the process group's key-value store, not its collectives: a plan is made while
TorchDynamo compiles, where a collective would run under the compiler's tensor modes (and TorchDynamo's
DDP optimizer compiles the graphs of a step one by one). Ranks plan at the same points of their step, so
the n-th planning of every rank meets the others' n-th; the store's timeout bounds a rank left waiting.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

__all__ = ["shared_across_ranks"]

T = TypeVar("T")

_plannings = itertools.count()
"""This process's plannings so far: the n-th of every rank meet under the same keys of the store."""


def shared_across_ranks(key: str, cached: T | None, solve: Callable[[], T]) -> tuple[T, str]:
    """The result for ``key`` and where it came from ("cache", "solved" or "rank K"): ``cached`` when this rank
    has it, else one rank's result (cached or solved) for every rank planning the same key."""
    if not _several_ranks():
        return (cached, "cache") if cached is not None else (solve(), "solved")
    import torch.distributed as dist

    store, rank, world = dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size()
    prefix = f"remat/plannings/{next(_plannings)}"
    _put(store, f"{prefix}/asks/{rank}", (key, cached is not None))
    asked = [pickle.loads(store.get(f"{prefix}/asks/{r}")) for r in range(world)]
    provider = _provider(key, asked)
    if provider == rank:
        made: T | BaseException
        try:
            made = cached if cached is not None else solve()
        except Exception as e:  # the other ranks wait for it: they raise it too
            made = e
        _put(store, f"{prefix}/results/{rank}", made)
        if isinstance(made, BaseException):
            raise made
        return made, "cache" if cached is not None else "solved"
    result: T | BaseException = pickle.loads(store.get(f"{prefix}/results/{provider}"))
    if isinstance(result, BaseException):
        raise result
    return result, f"rank {provider}"


def _put(store: Store, key: str, value: object) -> None:
    """Post ``value`` under ``key``, pickled (the store takes bytes, though torch's stub says str)."""
    store.set(key, pickle.dumps(value))  # type: ignore[arg-type]


def _provider(key: str, asked: list[tuple[str, bool]]) -> int:
    """The rank whose result the ranks planning ``key`` take: the lowest with it cached, else the lowest."""
    planning = [r for r, (k, _) in enumerate(asked) if k == key]
    return next((r for r in planning if asked[r][1]), planning[0])


def _several_ranks() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() \
        and torch.distributed.get_world_size() > 1
