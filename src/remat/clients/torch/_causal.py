"""Causal masks a model builds while traced, handed to attention as ``is_causal=True`` instead.

Eager transformers models pass no mask to ``scaled_dot_product_attention`` when the batch has no
padding: ``is_causal=True``, which lets the attention kernels skip the masked half. Traced, several
versions cannot look at the batch and build the causal mask as a tensor instead (transformers 5.17
under torch 2.11: ``arange(S)[None, None, None, :] <= arange(L)[None, None, :, None]``, expanded
over the batch): the kernels then read a dense mask and compute every block. On an H200 that made
GPT-2's attention 1.75 times slower, 10 % of its training step. A mask computed from constants alone
is evaluated when the step is compiled; where it is exactly the causal mask (``is_causal``'s, aligned
to the upper left), the call is given ``is_causal=True`` and no mask, as eager runs it.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

__all__ = ["causal_masks_as_flags"]

_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)
_BUILDERS = frozenset({"arange", "ones", "zeros", "full", "ones_like", "zeros_like", "full_like", "tril", "triu",
                       "where", "masked_fill", "expand", "view", "reshape", "unsqueeze", "to", "bool", "float",
                       "logical_not", "logical_and", "logical_or", "eq", "ne", "le", "lt", "ge", "gt"})
"""Functions and methods (besides :mod:`operator`'s) a constant mask may be built with: none draws random numbers or
reads state, so evaluating them when compiling changes nothing the step computes."""
_MASK, _CAUSAL = 3, 5
"""Positions of ``attn_mask`` and ``is_causal`` among the attention's arguments."""


def causal_masks_as_flags(gm: fx.GraphModule) -> int:
    """Rewrite each attention of TorchDynamo's graph ``gm`` given a constant causal mask to ``is_causal=True``; how
    many were rewritten."""
    rewritten = 0
    position = {node: k for k, node in enumerate(gm.graph.nodes)}
    verdicts: dict[fx.Node, bool] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        mask, causal = _argument(node, _MASK, "attn_mask"), _argument(node, _CAUSAL, "is_causal")
        if not isinstance(mask, fx.Node) or causal is not False:
            continue
        if mask not in verdicts:  # one mask is often shared by every layer
            verdicts[mask] = _is_causal(_constant(mask, position), node)
        if not verdicts[mask]:
            continue
        args = list(node.args[:_MASK])
        kwargs = {k: v for k, v in node.kwargs.items() if k not in ("attn_mask", "is_causal")}
        kwargs.update(zip(("dropout_p", "is_causal", "scale", "enable_gqa"), node.args[_MASK + 1:], strict=False))
        node.args, node.kwargs = tuple(args), {**kwargs, "attn_mask": None, "is_causal": True}
        _erase_unused(gm.graph, mask)
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def _argument(node: fx.Node, position: int, name: str) -> Any:
    """The attention's argument ``name``, given by ``position`` or keyword (False or None when left out)."""
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name, False if name == "is_causal" else None)


def _constant(mask: fx.Node, position: dict[fx.Node, int]) -> torch.Tensor | None:
    """The value of ``mask`` if the graph computes it from constants alone (no input, no module state, nothing
    random: :data:`_BUILDERS`), else None."""
    order: list[fx.Node] = []
    stack, seen = [mask], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if not _builds(node) or any(_mutates(user) for user in node.users):
            return None
        order.append(node)
        stack.extend(node.all_input_nodes)
    values: dict[fx.Node, Any] = {}
    with unset_fake_temporarily():
        for node in sorted(order, key=position.__getitem__):
            args = fx.node.map_arg(node.args, values.__getitem__)
            kwargs = fx.node.map_arg(node.kwargs, values.__getitem__)
            try:
                values[node] = (node.target(*args, **kwargs) if node.op == "call_function"  # type: ignore[operator]
                                else getattr(args[0], node.target)(*args[1:], **kwargs))  # type: ignore[arg-type]
            except Exception:  # arguments it takes traced only: not a mask to evaluate
                return None
    value = values[mask]
    return value if isinstance(value, torch.Tensor) else None


def _mutates(node: fx.Node) -> bool:
    """Whether ``node`` may change a tensor it reads in place (``x[i] = v``, ``x += v``, ``x.fill_(v)``)."""
    name = str(getattr(node.target, "__name__", node.target))
    if node.op == "call_method":
        return name.endswith("_") and not name.endswith("__")
    return node.op == "call_function" and getattr(node.target, "__module__", None) == "_operator" and (
        name in ("setitem", "delitem") or (name.startswith("i") and hasattr(operator, name[1:])))


def _builds(node: fx.Node) -> bool:
    """Whether ``node`` is a call a constant mask may be built with."""
    if node.op == "call_method":
        return node.target in _BUILDERS
    if node.op != "call_function":
        return False
    return getattr(node.target, "__module__", None) == "_operator" or (
        getattr(node.target, "__name__", None) in _BUILDERS and getattr(torch, str(node.target.__name__), None)  # type: ignore[union-attr]
        is node.target)


def _is_causal(mask: torch.Tensor | None, attention: fx.Node) -> bool:
    """Whether ``mask`` is ``is_causal``'s mask for the attention's query and key lengths, over any batch and heads: a
    boolean one, or one added to the scores (0 where a query sees a key, -inf or the dtype's least value elsewhere)."""
    query, key = (a.meta.get("example_value") if isinstance(a, fx.Node) else None for a in attention.args[:2])
    if mask is None or not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor) or mask.dim() < 2:
        return False
    length, keys = query.shape[-2], key.shape[-2]
    if tuple(mask.shape[-2:]) != (length, keys):
        return False
    seen = torch.ones(length, keys, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return bool((mask == seen).all())
    if not mask.is_floating_point():
        return False
    hidden = (mask == float("-inf")) | (mask == torch.finfo(mask.dtype).min)
    return bool(((mask == 0) == seen).all() and (hidden == ~seen).all())


def _erase_unused(graph: fx.Graph, node: fx.Node) -> None:
    """Erase ``node`` and what it reads, as far as nothing else reads them."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.users or current.op not in ("call_function", "call_method"):
            continue
        inputs = current.all_input_nodes
        graph.erase_node(current)
        stack.extend(inputs)

