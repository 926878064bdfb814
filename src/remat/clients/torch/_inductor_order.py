"""Inductor's kernels in the plan's order, so that compiled graphs hold about what the plan holds.

Inductor schedules the kernels of a graph its own way: it fuses ops into kernels and sorts the
kernels so that each comes after what it reads, visiting the kernels from the first; a kernel that
fuses an early op with a late one pulls everything the late one reads to the front. In a planned
backward that is every recomputation, hoisted to the start: on a diffusion UNet at 0.3 of its
activations, 2.4 times the plan's peak. :func:`in_plan_order` is run by Inductor after fusion
(``torch._inductor.config._post_fusion_custom_pass``): it sorts the kernels by the last op of the
lowered graph each one runs, and places each right after what it reads, so that each runs where
the plan runs its ops. Inductor's own reordering for memory, its switch of convolutions to
channels-last (which copies the values the plan saves), its padding of matrix operands and strides
on GPUs (padded copies of values such as GPT-2's logits, of a vocabulary of 50,257) and its reuse of a
dead buffer for a smaller value (which keeps the larger storage alive as long as the smaller value)
are turned off beside it (INDUCTOR_CONFIG), and fusions that would raise the peak are refused before
(:mod:`._inductor_fusion`). On that UNet at 0.5 the peak went from 1.96 times the plan's to 0.9.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._inductor_fusion import kernel_position, stop_watching, watch_fusions

__all__ = ["INDUCTOR_CONFIG", "in_plan_order"]


def in_plan_order(kernels: Sequence[Any]) -> list[Any]:
    """Inductor's scheduler nodes after fusion, in the order of the last graph op each one runs, each after
    the kernels that make what it reads."""
    from torch._inductor.virtualized import V

    stop_watching()
    graph: Any = V.graph.module.graph  # the graph Inductor lowers, whose nodes the kernels' origins are
    position = {node: k for k, node in enumerate(graph.nodes)}
    last = {kernel: kernel_position(kernel, position) for kernel in kernels}
    maker: dict[str, Any] = {}
    for kernel in kernels:
        for name in (*kernel.get_buffer_names(), *kernel.get_operation_names()):
            maker.setdefault(name, kernel)
    order: list[Any] = []
    placed: set[Any] = set()
    for start in sorted(kernels, key=last.__getitem__):
        stack = [(start, False)]
        while stack:  # depth first, the kernels it reads from before it (no recursion: graphs are deep)
            kernel, ready = stack.pop()
            if ready:
                order.append(kernel)
                continue
            if kernel in placed:
                continue
            placed.add(kernel)
            stack.append((kernel, True))
            reads = {maker.get(dep.name) for dep in kernel.unmet_dependencies}
            stack.extend((k, False) for k in sorted((k for k in reads if k is not None and k not in placed),
                                                   key=lambda k: -last[k]))
    return order


INDUCTOR_CONFIG: dict[str, Any] = {
    "_pre_fusion_custom_pass": watch_fusions,
    "_post_fusion_custom_pass": in_plan_order,
    "reorder_for_peak_memory": False,
    "layout_optimization": False,
    "shape_padding": False,
    "comprehensive_padding": False,
    "allow_buffer_reuse": False,
}
"""Inductor's settings while it compiles a planned graph (besides those of :mod:`._backend`)."""
