"""Inductor's fusions held to the plan's memory: a fusion that would raise the peak is refused.

A fused kernel runs where its last op runs (:func:`._inductor_order.in_plan_order`), so fusing an early
op with a late one keeps what the early op reads alive until the late one, and when a kernel between
them reads what the fused kernel makes, pulls the late op (and what it reads) forward to the early one.
Where memory is well under the plan's peak that costs nothing and the fusion saves time; near the peak
it pushes the step over its plan (ViT at 0.3 of its activations: 1.12 to 1.19 of the plan with
Inductor's fusions, at the plan with none, while GPT-2 without fusions holds 6 % more: fused kernels also
keep intermediates out of memory). :func:`watch_fusions` runs before Inductor fuses: it takes the memory
over the lowered graph's positions, each buffer live from the kernel that makes it to the last that
reads it, and lets through only the fusions that pull nothing forward and whose held reads fit under
that peak where they are held; :func:`stop_watching` runs after fusion (from ``in_plan_order``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["kernel_position", "stop_watching", "watch_fusions"]


def kernel_position(kernel: Any, position: dict[Any, int]) -> int:
    """The position of the last lowered-graph op that ``kernel`` runs (-1 if it runs none)."""
    return max((position.get(origin, -1) for part in kernel.get_nodes() if part.node is not None
                for origin in part.node.get_origins()), default=-1)


class _Memory:
    """Bytes live at each position of the graph Inductor lowers, before fusion, and where each buffer is read."""

    def __init__(self, kernels: Sequence[Any]) -> None:
        from torch._inductor.dependencies import WeakDep
        from torch._inductor.virtualized import V

        graph = V.graph
        lowered: Any = graph.module.graph  # the graph Inductor lowers, whose nodes the kernels' origins are
        position = {node: k for k, node in enumerate(lowered.nodes)}
        end = len(position)
        self.at = {kernel: kernel_position(kernel, position) for kernel in kernels}
        self.outputs = set(graph.get_output_names())
        self.readers: dict[str, list[Any]] = {}
        self.size: dict[str, int] = {}
        self.made_at: dict[str, int] = {}
        for kernel in kernels:
            for dep in kernel.read_writes.reads:
                if isinstance(dep, WeakDep):
                    continue
                self.readers.setdefault(dep.name, []).append(kernel)
                if dep.name in graph.graph_inputs:
                    self.size.setdefault(dep.name, graph.get_dep_size_hint(dep))
                    self.made_at.setdefault(dep.name, 0)
            for buf in kernel.get_outputs():
                self.size[buf.get_name()] = _buffer_bytes(buf)
                self.made_at[buf.get_name()] = self.at[kernel]
        change = [0] * (end + 2)
        for name, size in self.size.items():
            born = max(self.made_at[name], 0)
            dies = end if name in self.outputs else max((self.at[r] for r in self.readers.get(name, ())), default=born)
            change[born] += size
            change[max(dies, born) + 1] -= size
        self.live: list[int] = []
        total = 0
        for delta in change[:end + 1]:
            total += delta
            self.live.append(total)
        self.peak = max(self.live, default=0)

    def admits(self, scheduler: Any, node1: Any, node2: Any) -> bool:
        """Whether fusing ``node1`` and ``node2`` keeps the graph's memory under its peak."""
        parts = {*node1.get_nodes(), *node2.get_nodes()}
        if any(part not in self.at for part in parts):
            return True  # not a graph this memory was taken of
        fused_at = max(self.at[part] for part in parts)

        def at(kernel: Any) -> int:
            group = scheduler.name_to_fused_node.get(kernel.get_name(), kernel)
            return max(self.at.get(part, -1) for part in group.get_nodes())

        written = {buf.get_name() for part in parts for buf in part.get_outputs()}
        for name in written:  # a reader before the fused kernel would pull it forward
            if any(r not in parts and at(r) < fused_at for r in self.readers.get(name, ())):
                return False
        held, since = 0, fused_at
        for name in _reads(parts) - written - self.outputs:
            before = max((at(r) for r in self.readers.get(name, ()) if r not in parts), default=-1)
            before = max([before, *(at(node) for node in (node1, node2) if _reads_name(node, name))])
            if before < fused_at:  # live to its last reader anyway: held from the position after
                held += self.size.get(name, 0)
                since = min(since, before + 1)
        return held == 0 or max(self.live[since:fused_at + 1]) + held <= self.peak


class _PlanChoices:
    """Inductor's heuristics (``V.choices``) as they were, with fusions also asked of the plan's memory."""

    def __init__(self, prior: Any, memory: _Memory) -> None:
        self.prior = prior
        self.memory = memory

    def can_fuse(self, scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
        return (self.prior.can_fuse(scheduler, node1, node2, shared_data_score)
                and self.memory.admits(scheduler, node1, node2))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.prior, name)


def watch_fusions(kernels: list[Any]) -> list[Any]:
    """Inductor's pre-fusion pass: take the graph's memory and hold the fusions to come to it."""
    from torch._inductor.virtualized import V

    prior = V.choices
    V.set_choices_handler(_PlanChoices(getattr(prior, "prior", prior), _Memory(kernels)))
    return kernels


def stop_watching() -> None:
    """Inductor's heuristics as they were before :func:`watch_fusions`."""
    from torch._inductor.virtualized import V

    if isinstance(V.choices, _PlanChoices):
        V.set_choices_handler(V.choices.prior)


def _reads(parts: Iterable[Any]) -> set[str]:
    return {dep.name for part in parts for dep in part.read_writes.reads}


def _reads_name(node: Any, name: str) -> bool:
    return any(dep.name == name for dep in node.read_writes.reads)


def _buffer_bytes(buf: Any) -> int:
    """Bytes of a scheduler buffer's storage (0 for those that hold none of their own: multi-output, none)."""
    from torch._inductor.ir import MultiOutputLayout, NoneLayout
    from torch._inductor.utils import get_dtype_size
    from torch._inductor.virtualized import V

    if isinstance(buf.node.layout, (NoneLayout, MultiOutputLayout)):
        return 0
    numel = int(V.graph.sizevars.optimization_hint(buf.node.get_numel(), fallback=0))
    return numel * get_dtype_size(buf.node.get_dtype())
