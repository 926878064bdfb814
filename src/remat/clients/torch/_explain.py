"""A plan as a person reads it: what is live at its peak, what it recomputes or offloads, and where in the model.

:func:`explain` describes one planned graph: each value of the step by the module and source line that
made it, with its bytes, its cost and its fate (kept, recomputed, offloaded), and what is live at the
planned peak. Given one batch, it also runs the step once under :class:`~._measure.LiveBytes` and sets
the measured peak beside the planned one; where the measured peak is higher, it says which ops' outputs
were live there; :meth:`Explanation.plot` draws both timelines as SVG. The model is left as it was:
gradients, buffers and the random state are put back. The values are read by
:class:`remat.schedules.PlanValues` from the module and line the capture wrote into the graph's node
metadata, as the dashboard's job page reads them.
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from remat.report import memory_svg
from remat.schedules import PlanValue, PlanValues, format_size

from ._backend import PlannedGraph
from ._joint import MARKERS
from ._measure import LiveBytes

__all__ = ["Explanation", "Measured", "backward_starts", "explain"]

TOP = 12
"""Rows a table of the explanation shows (the largest values first)."""


@dataclass(frozen=True)
class Measured:
    """One step measured on the CPU (the dispatcher's count, to the byte): its peak and what was live there."""

    peak: int
    """Bytes the step allocated above what it held before, at most (the plan's peak less resident memory)."""
    timeline: tuple[int, ...]
    """The bytes after each op the step ran."""
    live_at_peak: tuple[tuple[str, int], ...]
    """Bytes live at the measured peak by the ATen op that made them, largest first."""


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found: ``str()`` of it is the report; the parts are here for a program."""

    planned: PlannedGraph
    read: PlanValues
    """The plan read value by value (the dashboard's job page reads a plan from this client the same way)."""
    measured: Measured | None = None

    @property
    def values(self) -> tuple[PlanValue, ...]:
        """Every value of the plan, in the graph's order."""
        return self.read.values

    @property
    def live_at_peak(self) -> tuple[PlanValue, ...]:
        """The values live right after the planned peak's compute, largest first."""
        return self.read.live_at_peak

    @property
    def planned_peak(self) -> int:
        """Bytes the plan allocates above what the step holds before it starts (its resident memory)."""
        return int(self.planned.simulation.peak_memory - self.planned.joint.resident_memory)

    @property
    def planned_timeline(self) -> np.ndarray:
        """The plan's memory after each statement, less resident memory (what a measured timeline compares to)."""
        return self.planned.simulation.timeline - self.planned.joint.resident_memory

    def plot(self, path: str | os.PathLike[str] | None = None) -> str:
        """Memory over the step as SVG, planned against measured (when measured), above resident memory, with the
        budget; written to ``path`` when given."""
        p = self.planned
        series = {"planned": self.planned_timeline}
        if self.measured is not None:
            series["measured"] = np.asarray(self.measured.timeline)
        svg = memory_svg(series, budget=p.budget - p.joint.resident_memory,
                         title=f"{p.joint.name}: memory above resident memory over one step")
        if path is not None:
            Path(path).write_text(svg)
        return svg

    def __str__(self) -> str:
        return "\n".join(self._lines())

    def _lines(self) -> Iterator[str]:
        p = self.planned
        sim, graph, joint = p.simulation, p.graph, p.joint
        peak_value = graph.nodes[p.plan.steps[sim.peak_step][1]]
        where = next((v for v in self.values if v.name == peak_value.id), None)
        yield (f"{joint.name}: {len(self.values)} values, budget {format_size(p.budget)}; planned peak "
               f"{format_size(sim.peak_memory)} ({format_size(joint.resident_memory)} of parameters, buffers and "
               f"inputs, {format_size(self.planned_peak)} more), {sim.cost / graph.base_cost:.3f}x the step's "
               f"compute; plan {p.result.strategy} {p.result.status.value} ({p.source})")
        if where is not None:
            yield (f"The peak comes in the {where.kind}, at {where.op} of {where.module or 'the step'}"
                   f"{' (' + where.line + ')' if where.line else ''}.")
        if self.measured is not None:
            yield from self._measured_lines()
        yield ""
        yield f"Live at the planned peak ({format_size(sum(v.bytes for v in self.live_at_peak))} of values):"
        yield from _table(self.live_at_peak[:TOP], len(self.live_at_peak))
        again = self.read.again
        yield ""
        extra = sum(v.extra_cost for v in again)
        yield (f"Recomputed or offloaded: {len(again)} of {len(self.values)} values, {extra / graph.base_cost:.1%} "
               f"more compute:" if again else "Nothing is recomputed or offloaded: every value is kept until its "
                                              "last reader.")
        yield from _table(again[:TOP], len(again))

    def _measured_lines(self) -> Iterator[str]:
        assert self.measured is not None
        measured, planned = self.measured.peak, self.planned_peak
        if measured <= planned:
            within = "the plan's to the byte" if measured == planned else \
                f"{format_size(planned - measured)} under the plan's {format_size(planned)}"
            yield f"Measured on one step: {format_size(measured)} above resident memory, {within}."
            return
        yield (f"Measured on one step: {format_size(measured)} above resident memory, {format_size(measured - planned)}"
               f" OVER the plan's {format_size(planned)}. Live at the measured peak, by the op that made them:")
        for op, nbytes in self.measured.live_at_peak[:TOP]:
            yield f"  {format_size(nbytes):>12}  {op}"


def explain(latest: Callable[[], PlannedGraph], *, step: Callable[[], Any] | None = None,
            model: nn.Module | None = None) -> Explanation:
    """Describe the ``latest`` planned graph; with ``step`` (one forward and backward of ``model``), run it first
    (which plans its shapes if they are new) and measure it once on the CPU, leaving ``model``'s gradients,
    buffers and the random state as they were."""
    measured = None if step is None else _measure(step, model)
    planned = latest()
    return Explanation(planned, PlanValues.of(planned.graph, planned.plan, planned.simulation, skip=MARKERS), measured)


def _table(values: Sequence[PlanValue], total: int) -> Iterator[str]:
    for v in values:
        where = " ".join(part for part in (v.module, f"({v.line})" if v.line else "") if part) or "the step"
        yield f"  {format_size(v.bytes):>12}  {v.fate:<16} {v.op:<42} {where}"
    if total > len(values):
        yield f"  ... and {total - len(values)} more"


class _MadeBy(LiveBytes):
    """:class:`LiveBytes` that remembers which op made each storage, and what was live at the peak."""

    def __init__(self) -> None:
        super().__init__()
        self._op: dict[int, str] = {}
        self.at_peak: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        before = set(self._live)
        peak = self.peak
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self._op.update({key: str(func) for key in set(self._live) - before})
        if self.peak > peak:
            at_peak: dict[str, int] = collections.Counter()
            for key, record in self._live.items():
                if not record.host:
                    at_peak[self._op.get(key, "?")] += record.nbytes
            self.at_peak = dict(at_peak)
        return out


def _measure(step: Callable[[], Any], model: nn.Module | None) -> Measured:
    """Run ``step`` once as a warm-up (it compiles), then under the recorder, putting ``model`` back as it was."""
    with _as_it_was(model):
        step()
    recorder = _MadeBy()
    with _as_it_was(model), recorder:
        step()
    live = sorted(recorder.at_peak.items(), key=lambda item: -item[1])
    return Measured(peak=recorder.peak, timeline=tuple(recorder.timeline), live_at_peak=tuple(live))


@contextlib.contextmanager
def _as_it_was(model: nn.Module | None) -> Iterator[None]:
    """Run a step that leaves ``model``'s gradients, buffers and the random state as they were (and starts it
    without gradients, as a step after ``zero_grad()`` does)."""
    params = list(model.parameters()) if model is not None else []
    grads = [p.grad for p in params]
    buffers = [b.clone() for b in model.buffers()] if model is not None else []
    rng = torch.get_rng_state()
    for p in params:
        p.grad = None
    try:
        yield
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for b, saved in zip(model.buffers() if model is not None else [], buffers, strict=True):
                b.copy_(saved)
        torch.set_rng_state(rng)


def backward_starts(out: Any, refused: type) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Where a loop backpropagates a step's outputs from, and with what gradients: its loss (its one scalar with a
    gradient of its own), else every output with a gradient, with gradients of ones (outputs whose backward is
    ``refused`` left out). Returning them alone lets the caller drop the other outputs before ``backward()``."""
    tensors = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None
               and not isinstance(t.grad_fn, refused)]
    scalars = [t for t in tensors if t.dim() == 0]
    if len(scalars) == 1:
        return scalars, None
    return tensors, [torch.ones_like(t) for t in tensors]
