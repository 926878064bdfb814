"""The drop-in API: capture a model's training step, get a plan, and train following it.

>>> m = rematerialize(model, (x, y), budget_ratio=0.8)        # doctest: +SKIP
>>> loss = m(x, y); loss.backward(); optimizer.step()         # doctest: +SKIP

The captured function is the training step up to its loss: ``model(*inputs)`` when the model
returns its loss, or ``loss_fn(model, *inputs)``. The returned module shares the model's
parameters and buffers; an optimizer built on either works for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import unset_fake_temporarily

from remat.schedules import (
    Graph,
    InvalidPlan,
    Plan,
    Simulation,
    format_size,
    parse_size,
    resolve_budget,
    simulate,
)
from remat.solvers import FITTING_STATUSES

from ._capture import Capture, LossFn, capture
from ._costs import node_costs
from ._errors import CaptureError, PlanRejected
from ._lower import boxed_compiler, partition_fn

__all__ = ["RematModule", "check_result", "export_graph", "rematerialize"]



class RematModule(nn.Module):
    """A model whose training step runs a rematerialization plan.

    Calling it runs the captured step, ``model(*inputs)`` or ``loss_fn(model, *inputs)``, and
    returns the loss; ``loss.backward()`` then runs the plan's backward. Outside training (no
    grad, or a module's ``training`` flag changed since capture) it runs the step eagerly.

    Attributes
    ----------
    graph : Graph
        The exported remat.graph/v1 (``graph.to_json()`` is the document).
    result : dict
        The remat.result/v1 the module follows.
    plan : Plan
        The plan, already simulated: ``simulation`` holds its cost and peak.
    fixed : dict
        The graph's fixed memory by category: parameters, buffers, inputs, gradients, outputs (the
        loss and buffer updates), tangents, and bounds on saved random states and input copies.
    """

    def __init__(self, cap: Capture, compiled: Any, graph: Graph, result: Mapping[str, Any], plan: Plan,
                 simulation: Simulation, inputs: Sequence[torch.Tensor]) -> None:
        super().__init__()
        self.step = cap.step
        self.graph = graph
        self.result = dict(result)
        self.plan = plan
        self.simulation = simulation
        self.fixed = dict(cap.joint.fixed)
        self._capture = cap
        self._compiled = compiled
        self._modes = _modes(cap.step)
        self._signature = _signature([*cap.flat_state(), *inputs])

    def forward(self, *inputs: Any) -> Any:
        if not torch.is_grad_enabled() or _modes(self.step) != self._modes:
            return self.step(*inputs)
        args = [*self._capture.flat_state(), *inputs]
        if _signature(args) != self._signature:
            raise CaptureError(_mismatch(self._signature, _signature(args), len(args) - len(inputs)))
        return self._compiled(*args)


def rematerialize(model: nn.Module, example_inputs: Sequence[torch.Tensor], budget: int | str | None = None,
                  budget_ratio: float | None = None, strategy: str = "checkmate", server: str | None = None, *,
                  loss_fn: LossFn | None = None, cost_model: str = "flops", device: str | None = None,
                  graph: Graph | None = None, result: Mapping[str, Any] | None = None,
                  **solve_options: Any) -> RematModule:
    """Capture ``model``'s training step, find a plan within the budget, and return a module that runs it.

    Parameters
    ----------
    model : nn.Module
        Returns its loss (a scalar) from ``model(*inputs)``, unless ``loss_fn`` is given.
    example_inputs : sequence of Tensor
        One batch; the plan is made for these shapes, dtypes and devices.
    budget, budget_ratio
        Exactly one: bytes (or a size such as ``"2GiB"``) including fixed memory (parameters,
        gradients, inputs), or a fraction of the checkpoint-all peak (DESIGN.md).
    strategy : str
        A strategy of ``remat strategies``.
    server : str, optional
        URL of a remat service to solve on; in-process by default.
    loss_fn : callable, optional
        ``loss_fn(model, *inputs) -> loss`` when the model does not return its loss.
    cost_model : {"flops", "measured"}
        Roofline estimate against a device profile, or per-node timing on the real device.
    device : str, optional
        Device profile of the roofline (``"cpu"``, ``"a100"``, ``"h100"``...); default from the tensors.
    graph : Graph, optional
        The graph exported from this step earlier (``remat profile``, :func:`export_graph`): its
        costs are reused instead of made again; the step must still export the same graph.
    result : dict, optional
        A remat.result/v1 to follow instead of solving (``remat solve --output`` on this model's
        graph); it is checked like any other, against its own budget unless one is given.
    **solve_options
        Passed to the solver: ``backend``, ``time_limit_s``, ``mip_gap``...

    Raises
    ------
    CaptureError
        The step cannot be captured as one static graph; the message says why.
    PlanRejected
        No plan fits, or the plan received does not simulate within the budget.
    """
    inputs = _tensors(example_inputs)
    budget_bytes = parse_size(budget) if budget is not None else None
    with capture(model, inputs, loss_fn=loss_fn) as cap:
        graph = _graph(cap, inputs, cost_model=cost_model, device=device) if graph is None else _same(cap, graph)
        if result is None:
            result = _solve(graph, budget=budget_bytes, budget_ratio=budget_ratio, strategy=strategy, server=server,
                            options=solve_options)
        elif budget_bytes is None and budget_ratio is None:
            budget_bytes = int(result.get("budget") or 0)
        requested = resolve_budget(graph, budget=budget_bytes, budget_ratio=budget_ratio)
        plan, simulation = check_result(graph, result, budget=requested)
        compiled = cap.compile(partition_fn(cap.joint, graph, plan), boxed_compiler)
        return RematModule(cap, compiled, graph, result, plan, simulation, inputs)


def export_graph(model: nn.Module, example_inputs: Sequence[torch.Tensor], *, loss_fn: LossFn | None = None,
                 cost_model: str = "flops", device: str | None = None) -> Graph:
    """The remat.graph/v1 of ``model``'s training step (what ``remat profile`` writes)."""
    inputs = _tensors(example_inputs)
    with capture(model, inputs, loss_fn=loss_fn) as cap:
        return _graph(cap, inputs, cost_model=cost_model, device=device)


def check_result(graph: Graph, result: Mapping[str, Any], *, budget: int) -> tuple[Plan, Simulation]:
    """Re-simulate the plan of a remat.result/v1 and refuse it unless it fits ``budget`` on this graph."""
    status = result.get("status")
    if status not in FITTING_STATUSES:
        log = ((result.get("log") or [""])[-1])[:300]
        raise PlanRejected(
            f"Strategy {result.get('strategy')!r} returned status {status!r} for a budget of "
            f"{format_size(budget)} (the smallest feasible is {format_size(graph.min_feasible_budget)}, "
            f"checkpoint-all needs {format_size(graph.checkpoint_all_peak)}). {log}".strip())
    if result.get("graph_sha256") != graph.sha256:
        raise PlanRejected("The result was made for another graph (its graph_sha256 differs).")
    try:
        plan = Plan.from_json(graph, result.get("plan"))
        simulation = simulate(graph, plan)
    except InvalidPlan as e:
        raise PlanRejected(f"The plan received does not simulate: {e}") from e
    if simulation.peak_memory > budget:
        raise PlanRejected(f"The plan received peaks at {format_size(simulation.peak_memory)}, over the budget "
                           f"of {format_size(budget)}.")
    return plan, simulation


# -- helpers ------------------------------------------------------------------------------------


def _graph(cap: Capture, inputs: Sequence[torch.Tensor], *, cost_model: str, device: str | None) -> Graph:
    """The step's graph with node costs; real tensors are made outside the capture's fake-tensor mode."""
    joint = cap.joint
    with unset_fake_temporarily():
        tangents = [_ones_like(cap, name) for name in joint.tangents]
        costs, unit = node_costs(joint, [*cap.flat_state(), *inputs, *tangents], cost_model=cost_model,
                                 device=device)
    return joint.to_graph(costs, cost_unit=unit)


def _same(cap: Capture, graph: Graph) -> Graph:
    """``graph`` again, checked against the step just captured: same nodes, sizes and deps; its costs."""
    costs = {n.id: n.cost for n in graph.nodes}
    missing = [p.name for p in cap.joint.producers if p.name not in costs]
    again = None if missing else cap.joint.to_graph(costs, cost_unit=graph.cost_unit)
    if again is None or again.sha256 != graph.sha256:
        raise CaptureError("The model's training step no longer exports the graph given; export it again.")
    return again


def _ones_like(cap: Capture, placeholder: str) -> torch.Tensor:
    val = next(n for n in cap.joint.module.graph.nodes if n.name == placeholder).meta["val"]
    return torch.ones(val.shape, dtype=val.dtype, device=val.device)


def _solve(graph: Graph, *, budget: int | None, budget_ratio: float | None, strategy: str, server: str | None,
           options: Mapping[str, Any]) -> dict[str, Any]:
    if server is None:
        from remat.solvers import solve

        return solve(graph, budget=budget, budget_ratio=budget_ratio, strategy=strategy, **options).to_json()
    from remat.clients.http import Client

    with Client(server) as client:
        return client.solve(graph, budget=budget, budget_ratio=budget_ratio, strategy=strategy, **options)


def _tensors(example_inputs: Sequence[Any]) -> list[torch.Tensor]:
    inputs = list(example_inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise CaptureError(f"example_inputs[{i}] is a {type(x).__name__}; pass tensors only (close over other "
                               f"values in loss_fn).")
    return inputs


def _modes(module: nn.Module) -> list[bool]:
    """The ``training`` flags the captured graph bakes in (dropout, batch norm)."""
    return [m.training for m in module.modules()]


def _signature(args: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [(tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a),) for a in args]


def _mismatch(expected: list[tuple[Any, ...]], got: list[tuple[Any, ...]], n_state: int) -> str:
    if len(expected) != len(got):
        return f"The plan was made for {len(expected) - n_state} inputs; got {len(got) - n_state}."
    k = next(i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b)
    what = f"input {k - n_state}" if k >= n_state else "a parameter or buffer"
    return (f"The plan was made for {what} of shape, dtype and device {expected[k]}, got {got[k]}; "
            f"call rematerialize again for the new shapes.")
