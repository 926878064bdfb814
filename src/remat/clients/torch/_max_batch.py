"""The largest batch of a PyTorch model whose step fits a device: captured at a few batch sizes, solved at any."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from remat.schedules import BatchedGraph, InvalidRequest, parse_size
from remat.solvers import MaxBatch
from remat.solvers import max_batch as solve_max_batch

from ._api import export_graph
from ._capture import LossFn

__all__ = ["max_batch"]


def max_batch(model: nn.Module, make_inputs: Callable[[int], Any], budget: int | str, *,
                  batches: Sequence[int] = (2, 4, 8), strategy: str = "checkmate", max_overhead: float | None = None,
                  loss_fn: LossFn | None = None, cost_model: str = "flops", device: str | None = None,
                  **solve_options: Any) -> MaxBatch:
    """The largest batch whose step, planned by ``strategy``, fits ``budget`` bytes (``"80GiB"``...).

    The step is captured at each of ``batches`` (``make_inputs(b)`` gives one batch of ``b``, as
    :func:`rematerialize` takes it), memory and cost are fitted as lines in the batch (and checked),
    and the batch is searched; a step may cost at most ``max_overhead`` times its base cost, by
    default one extra forward pass. ``solve_options`` go to the solver (``time_limit_s``, ``convergence``...).
    """
    if len(set(batches)) < 2:
        raise InvalidRequest("max_batch needs two or more distinct batch sizes to capture at.", field="batches")
    limit = parse_size(budget)  # refused before anything is captured
    graphs = {}
    for b in sorted(set(batches)):
        graphs[b] = export_graph(model, make_inputs(b), loss_fn=loss_fn, cost_model=cost_model, device=device)
    return solve_max_batch(BatchedGraph.from_graphs(graphs), limit, strategy=strategy, max_overhead=max_overhead,
                           **solve_options)
