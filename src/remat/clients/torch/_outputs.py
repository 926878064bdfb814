"""Which outputs of a step the backward starts from, and what becomes of the others.

AOTAutograd gives every output that requires grad a gradient in the backward: zeros for those the loop
never backpropagates (a language model's logits beside its loss, its key/value cache), and they would be
held to the end of the step. The loop people write, ``loss = model(**batch).loss; loss.backward()``, drops
them after the forward. So by default (AUTO) a step that returns its loss beside other outputs is planned
for that loop: the others are detached in TorchDynamo's graph (:func:`drop_outputs`) and counted until the
end of the forward. Each comes back as a view whose backward raises (:func:`guard_dropped_outputs`), so
that a loop that does backpropagate through one gets an error, never a gradient with a term missing, and
a warning says how much more than planned the step holds if one is still alive when the backward starts.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from remat.schedules import format_size

from ._capture import backward_start
from ._errors import CaptureError, PlanRejected

__all__ = ["AUTO", "NO_GRADIENT", "drop_outputs", "guard_dropped_outputs"]

AUTO = "auto"
"""``backward_from`` by default: the step's loss, when it returns one beside other outputs (:func:`drop_outputs`)."""


def drop_outputs(gm: fx.GraphModule, backward_from: str | int | None) -> list[int] | None:
    """Detach every output of TorchDynamo's graph but the one the backward starts from; the positions of
    the detached outputs that had a gradient, or None when every output keeps its own.

    The output is the one the step marked (:func:`._capture.backward_start`); unmarked, with
    ``backward_from="auto"``, the graph's one scalar that has a gradient among others that have one (a
    loss returned with logits), else none.
    """
    markers = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is backward_start]
    kept = {marker.args[0] for marker in markers}
    for marker in markers:
        marker.replace_all_uses_with(marker.args[0])
        gm.graph.erase_node(marker)
    output = next(iter(gm.graph.find_nodes(op="output")))
    values = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    if not kept and backward_from == AUTO:
        kept = _lone_loss(values)
    if not kept:
        if backward_from not in (None, AUTO):
            raise CaptureError(f"backward_from={backward_from!r} names no tensor among the step's outputs (a "
                               f"transformers model computes its loss only when given labels).")
        gm.recompile()
        return None

    def with_gradient(node: Any) -> bool:
        value = node.meta.get("example_value") if isinstance(node, fx.Node) else None
        return isinstance(value, torch.Tensor) and value.requires_grad

    dropped = [i for i, node in enumerate(values) if node not in kept and with_gradient(node)]

    def detach(node: fx.Node) -> fx.Node:
        if node in kept or not isinstance(node.meta.get("example_value"), torch.Tensor):
            return node
        with gm.graph.inserting_before(output):
            detached = gm.graph.call_method("detach", (node,))
        detached.meta = {**node.meta, "example_value": node.meta["example_value"].detach()}
        return detached

    output.args = fx.node.map_arg(output.args, detach)
    gm.recompile()
    return dropped


def _lone_loss(values: Sequence[Any]) -> set[fx.Node]:
    """The one scalar output with a gradient, when other outputs have one too (a loss beside logits); else none."""
    examples = {n: n.meta.get("example_value") for n in values if isinstance(n, fx.Node)}
    with_gradient = [n for n, v in examples.items() if isinstance(v, torch.Tensor) and v.requires_grad]
    scalars = [n for n in with_gradient if examples[n].dim() == 0]  # type: ignore[union-attr]
    return {scalars[0]} if len(scalars) == 1 and len(with_gradient) > 1 else set()


class _NoGradient(torch.autograd.Function):
    """An output the plan returns without gradient: a view of it whose backward says so, instead of a silently
    missing term in the gradients (``anchor`` is a tensor that requires grad, so that the view does too)."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, anchor: torch.Tensor, message: str) -> torch.Tensor:
        ctx.message = message
        return value.view_as(value)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise PlanRejected(ctx.message)


_ANCHOR = torch.zeros((), requires_grad=True)

NO_GRADIENT: type = _NoGradient._backward_cls
"""The autograd node of an output returned without gradient: backpropagating into it raises."""


def guard_dropped_outputs(outputs: Sequence[Any], dropped: Sequence[int], name: str,
                           backward_from: str | int | None) -> list[Any]:
    """``outputs`` with those at ``dropped`` made to refuse a gradient; a warning if one is still held when the
    backward starts (the plan counts them until the end of the forward only)."""
    start = "its loss" if backward_from == AUTO else f"its output {backward_from!r}"
    refusal = (f"{name}: the backward of this step was planned from {start} alone, so its other outputs come "
               f"without gradient; to backpropagate through them too, plan with backward_from=None.")
    guarded = list(outputs)
    for i in dropped:
        if isinstance(guarded[i], torch.Tensor):
            guarded[i] = _NoGradient.apply(guarded[i], _ANCHOR, refusal)  # type: ignore[no-untyped-call]
    watched = [weakref.ref(guarded[i]) for i in dropped if isinstance(guarded[i], torch.Tensor)]
    starts = [t.grad_fn for k, t in enumerate(guarded)
              if k not in dropped and isinstance(t, torch.Tensor) and t.grad_fn is not None]
    if not watched or not starts:
        return guarded

    def check(_: Any) -> None:
        held = [t for t in (ref() for ref in watched) if t is not None]
        if held:
            size = format_size(sum(t.untyped_storage().nbytes() for t in held))
            warnings.warn(f"{name}: {len(held)} outputs besides {start} ({size}) were still held when the backward "
                          f"started; the plan counts them until the end of the forward only, so the step holds up "
                          f"to {size} more than planned. Drop them before backward(), as in "
                          f"loss = model(**batch).loss, or plan with backward_from=None.", ResourceWarning,
                          stacklevel=2)

    starts[0].register_prehook(check)
    return guarded
