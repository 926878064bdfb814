"""The Checkmate MILP with copies to host memory: keep, recompute or offload each value, stage by stage.

Added to the Checkmate model (:mod:`._model`), per stage t and value i:

- ``O[t, i]``, binary: i is offloaded during stage t. It must be resident at the start of the stage
  (``O <= S``), stays counted through the stage, and is gone at the next one (the offload takes the
  place of its free). A value is offloaded at most once: its host copy stays for the whole step
  (docs/plans.md, "Offload"), and reloads reuse it.
- ``L[t, i]``, binary: i is reloaded during stage t from a host copy made in an earlier stage. It is
  counted through stage t (a reload allocates when its copy starts) and resident from stage t + 1
  on; computes of stage t cannot read it (a prefetch), and it must not be resident or computed in
  stage t (``R + S + L <= 1``).
- ``E[t] >= 0``: how much longer stage t lasts than its computes. The three streams run side by side,
  so the stage lasts ``max(computes, offload copies, reload copies)``, each copy lasting
  ``transfer.duration(bytes)``; the objective is the sum of the stage lengths.

With ``host_budget``, the bytes offloaded are at most that. A solution becomes a plan by
:func:`remat.schedules.plan_from_schedule` with its offloads and reloads: reloads at the start of their
stage, offloads where the value would otherwise be freed.

The simulator runs that plan asynchronously: every statement waits only on earlier statements that end
no later than in the stage-by-stage model, so the simulated makespan is at most the model's objective.
Its peak may be higher than the model's memory, though, where the compute stream runs ahead of an
offload whose copy ends late (the value is released only then); so each stage of the plan begins with
a ``wait`` for the previous stage's offloads, as the model's stages do, and the plan without those
waits is taken instead when it fits and costs no more. The model's optimum is still no bound on the
simulated cost (the simulator overlaps more than the model): every solution is simulated, and
:attr:`OffloadModel.proves` is False.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from remat.schedules import Graph, Schedule, Transfer, plan_from_schedule, recompute_closure, simulate

from ..backends import MilpModel
from ._model import CheckmateModel, Solution, _Builder

__all__ = ["OffloadModel", "build_offload_model"]


@dataclass(frozen=True, eq=False)
class OffloadModel(CheckmateModel):
    """The Checkmate model with offloads and reloads; ``O_var`` and ``L_var`` map (t, i) to variables (-1: none)."""

    O_var: np.ndarray
    L_var: np.ndarray
    transfer: Transfer

    @property
    def proves(self) -> bool:
        """Never: the stage-by-stage model neither bounds the simulated cost nor guarantees its peak."""
        return False

    def transfers(self, watched: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The offload and reload matrices of a solution, rounded, without copies nothing uses.

        An offload no later reload reads back only delays the value's release, so it becomes a free; a
        reload of a value the next stage does not keep is dropped.
        """
        offloads, reloads = (self._values(var, watched) for var in (self.O_var, self.L_var))
        S = np.round(self.retention_values(watched)) >= 1
        reloads[:-1] &= S[1:]
        reloads[-1] = False
        reloaded_later = np.flip(np.cumsum(np.flip(reloads, axis=0), axis=0), axis=0) > 0
        offloads[:-1] &= reloaded_later[1:]
        offloads[-1] = False
        return offloads, reloads

    def evaluate(self, watched: np.ndarray) -> Solution:
        """The plan of a solution, simulated with the model's transfer; a solution without copies is a schedule.

        The plan whose stages wait for the previous stage's offloads keeps to the model's memory; the one that
        does not wait is taken instead when it fits the budget too and costs no more.
        """
        offloads, reloads = self.transfers(watched)
        S = np.round(self.retention_values(watched)) >= 1
        schedule = Schedule(recompute_closure(self.graph, S, reloads=reloads), S)
        if not offloads.any():
            return super().evaluate(watched)
        waiting, free_running = (
            plan_from_schedule(self.graph, schedule, offloads=offloads, reloads=reloads, waits=waits)
            for waits in (True, False))
        held = simulate(self.graph, waiting, transfer=self.transfer)
        ahead = simulate(self.graph, free_running, transfer=self.transfer)
        if ahead.peak_memory <= self.budget and ahead.cost <= held.cost:
            return Solution(None, free_running, ahead)
        return Solution(None, waiting, held)

    def _values(self, var: np.ndarray, watched: np.ndarray) -> np.ndarray:
        """A watched family of binaries as a boolean (stage, node) matrix."""
        assert self.milp.watch is not None
        first = int(self.milp.watch[0])
        values = np.zeros(var.shape, dtype=bool)
        exists = var >= 0
        values[exists] = np.round(watched[var[exists] - first]) >= 1
        return values


def build_offload_model(graph: Graph, budget: int, transfer: Transfer, stopped: Callable[[], bool] = lambda: False,
                        *, host_budget: int | None = None) -> OffloadModel | None:
    """The joint keep / recompute / offload MILP for ``graph`` under ``budget`` bytes, copies timed by ``transfer``.

    Returns None once ``stopped()`` is true during the build.

    Examples
    --------
    >>> from remat.schedules import Graph, Transfer
    >>> g = Graph.from_json({"format": "remat.graph/v1", "nodes": [
    ...     {"id": "a", "deps": [], "cost": 1, "memory": 4},
    ...     {"id": "b", "deps": ["a"], "cost": 1, "memory": 4},
    ...     {"id": "c", "deps": ["b"], "cost": 1, "memory": 4},
    ...     {"id": "d", "deps": ["c", "a"], "cost": 1, "memory": 4}]})
    >>> m = build_offload_model(g, 12, Transfer(bandwidth=4))
    >>> int((m.O_var >= 0).sum()), int((m.L_var >= 0).sum())   # a out in stage 1 or 2 and back in 2, b out in 2
    (3, 1)
    """
    model = _OffloadBuilder(graph, budget, transfer, host_budget).build(stopped)
    assert model is None or isinstance(model, OffloadModel)
    return model


class _OffloadBuilder(_Builder):
    """The Checkmate builder plus offload, reload and stage-length variables and their rows."""

    title = "checkmate-offload"

    def __init__(self, graph: Graph, budget: int, transfer: Transfer, host_budget: int | None) -> None:
        super().__init__(graph, budget, range(graph.size))
        self.transfer, self.host_budget = transfer, host_budget
        n = graph.size
        self.copy_time = np.array([transfer.duration(int(m)) for m in graph.memory]) / self.cost_scale
        self.O_var = np.full((n, n), -1, dtype=np.int64)
        self.L_var = np.full((n, n), -1, dtype=np.int64)
        self.E_var = np.full(n, -1, dtype=np.int64)

    def variables(self) -> np.ndarray:
        """R and S, then O and L (carried with S by every incumbent), then one E per stage."""
        retention = super().variables()
        b, n, sizes = self.b, self.n, self.scale.sizes
        first = int(retention[0]) if retention.size else b.n_vars
        for t in range(n - 1):
            # worth offloading in stage t: held at its start, of some size, and still needed in the next stage
            nodes = [i for i in self.stage_nodes[t] if sizes[i] > 0 and i in self.stage_nodes[t + 1]]
            self.O_var[t, nodes] = b.add_variables(len(nodes), lower=0, upper=1, integer=True)
        offloadable = np.cumsum(self.O_var >= 0, axis=0) > 0
        for t in range(1, n - 1):
            nodes = [i for i in self.stage_nodes[t + 1] if offloadable[t - 1, i]]
            self.L_var[t, nodes] = b.add_variables(len(nodes), lower=0, upper=1, integer=True)
        watch = np.arange(first, b.n_vars, dtype=np.int64)
        self.E_var[:] = b.add_variables(n, lower=0, upper=math.inf, integer=False, cost=1.0)
        return watch

    def arriving(self, t: int, i: int) -> list[int]:
        return [int(self.L_var[t, i])] if self.L_var[t, i] >= 0 else []

    def leaving(self, t: int, i: int) -> list[int]:
        return [int(self.O_var[t, i])] if self.O_var[t, i] >= 0 else []

    def rows(self, t: int) -> None:
        """The Checkmate rows of stage t, then its copies: what they need, and how long the stage lasts."""
        super().rows(t)
        b = self.b
        for i in map(int, np.flatnonzero(self.O_var[t] >= 0)):
            b.add_row([int(self.O_var[t, i]), int(self.S_var[t, i])], [1.0, -1.0], -math.inf, 0.0)
        for i in map(int, np.flatnonzero(self.L_var[t] >= 0)):
            made = [int(v) for v in self.O_var[:t, i] if v >= 0]
            b.add_row([int(self.L_var[t, i]), *made], [1.0, *([-1.0] * len(made))], -math.inf, 0.0)
        for family in (self.O_var, self.L_var):
            self.lasts_as_long_as(t, family[t])
        if t == self.n - 1:
            self.once_and_within_host_budget()

    def lasts_as_long_as(self, t: int, copies: np.ndarray) -> None:
        """``E[t] >= (copies' durations) - (stage t's computes)``: the stage lasts as long as its copies."""
        nodes = [int(i) for i in np.flatnonzero(copies >= 0)]
        if not nodes:
            return
        computes = [int(v) for v in self.R_var[t, self.stage_nodes[t]]]
        costs = self.graph.cost[self.stage_nodes[t]] / self.cost_scale
        self.b.add_row([int(self.E_var[t]), *computes, *(int(copies[i]) for i in nodes)],
                       [1.0, *costs.tolist(), *(-self.copy_time[nodes]).tolist()],
                       -float(self.graph.cost[t]) / self.cost_scale, math.inf)

    def once_and_within_host_budget(self) -> None:
        """Each value offloaded at most once; with a host budget, the bytes offloaded fit it."""
        b = self.b
        offloaded = []
        for i in range(self.n):
            made = [int(v) for v in self.O_var[:, i] if v >= 0]
            if len(made) > 1:
                b.add_row(made, [1.0] * len(made), -math.inf, 1.0)
            offloaded += [(v, float(self.graph.memory[i])) for v in made]
        if self.host_budget is not None and offloaded:
            b.add_row([v for v, _ in offloaded], [m for _, m in offloaded], -math.inf, float(self.host_budget))

    def model(self, milp: MilpModel) -> OffloadModel:
        base = super().model(milp)
        return OffloadModel(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
                            O_var=self.O_var, L_var=self.L_var, transfer=self.transfer)
