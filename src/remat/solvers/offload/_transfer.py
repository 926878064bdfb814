"""The transfer parameters an offloading strategy runs with."""

from __future__ import annotations

from remat.schedules import Transfer

from .._context import SolveContext
from .._strategy import missing_transfer

__all__ = ["required_transfer"]


def required_transfer(ctx: SolveContext, strategy: str) -> Transfer:
    """``ctx.offload.transfer``; InvalidRequest saying how to give one when the solve has none.

    solve() refuses such requests before any strategy runs; this guards strategies run another way.
    """
    if ctx.offload.transfer is None:
        raise missing_transfer(strategy)
    return ctx.offload.transfer
