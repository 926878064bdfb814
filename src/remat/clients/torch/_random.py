"""Dropout computed again with the numbers it drew the first time, as ops any compiler runs as they are.

A plan may compute a random op more than once; each computation must draw what the first drew, as the
unpatched step did once. torch's ``run_and_save_rng_state`` / ``run_with_rng_state`` do that in graphs
run op for op, but Inductor cannot compile them on the CPU (their fake version hands back the real
generator state). Dropout, the random op of the models people train (alone, or inside attention on
CUDA devices), is replayed instead by two custom ops per aten op that Inductor calls as they are: the
first saves the generator's state and draws, as the first computation; the second draws again from
that state and puts the generator back where it was, so the step's later random ops draw what they
would have.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["REPLAYED", "Replay"]


@contextlib.contextmanager
def _generator_at(state: torch.Tensor, device: torch.device) -> Iterator[None]:
    """Draw from ``state`` in the block; the generator of ``device`` is put back where it was after it."""
    before = _state(device)
    _set_state(state, device)
    try:
        yield
    finally:
        _set_state(before, device)


def _state(device: torch.device) -> torch.Tensor:
    return torch.get_rng_state() if device.type == "cpu" else torch.cuda.get_rng_state(device)


def _set_state(state: torch.Tensor, device: torch.device) -> None:
    if device.type == "cpu":
        torch.set_rng_state(state)
    else:
        torch.cuda.set_rng_state(state, device)


@dataclass(frozen=True)
class Replay:
    """The two custom ops that replay one random aten op: ``saving`` returns the op's outputs and then the
    generator state it drew from; ``with_state`` takes that state first and draws again from it."""

    saving: Any
    with_state: Any


def _replay(op: Any) -> Replay:
    """Define remat's two custom ops for the random aten ``op``, with its arguments and outputs (from its schema)."""
    schema = op._schema
    name = schema.name.split("::")[1].lstrip("_")
    args, returns = str(schema).split("(", 1)[1].rsplit(") -> ", 1)
    outputs = returns[1:-1] if returns.startswith("(") else returns
    several = returns.startswith("(")
    saving, again = f"remat::{name}_saving_state", f"remat::{name}_with_state"
    torch.library.define(saving, f"({args}) -> ({outputs}, Tensor state)")
    torch.library.define(again, f"(Tensor state, {args}) -> {returns}")

    def drawn(*a: Any, **k: Any) -> tuple[Any, ...]:
        out = op(*a, **k)
        return tuple(out) if several else (out,)

    @torch.library.impl(saving, "default")
    def _(*a: Any, **k: Any) -> tuple[Any, ...]:
        state = _state(_first_tensor(a).device)
        return (*drawn(*a, **k), state)

    @torch.library.register_fake(saving)  # type: ignore[untyped-decorator]
    def _(*a: Any, **k: Any) -> tuple[Any, ...]:
        first = _first_tensor(a)
        size = _state(first.device).numel()  # the real generator's: its state is a fixed number of bytes
        return (*drawn(*a, **k), first.new_empty((size,), dtype=torch.uint8, device="cpu"))

    @torch.library.impl(again, "default")
    def _(state: torch.Tensor, *a: Any, **k: Any) -> Any:
        with _generator_at(state, _first_tensor(a).device):
            return op(*a, **k)

    @torch.library.register_fake(again)  # type: ignore[untyped-decorator]
    def _(state: torch.Tensor, *a: Any, **k: Any) -> Any:
        return op(*a, **k)

    return Replay(getattr(torch.ops.remat, f"{name}_saving_state").default,
                  getattr(torch.ops.remat, f"{name}_with_state").default)


def _first_tensor(args: tuple[Any, ...]) -> torch.Tensor:
    return next(a for a in args if isinstance(a, torch.Tensor))


REPLAYED: dict[Any, Replay] = {
    op.default: _replay(op.default)
    for op in (getattr(torch.ops.aten, name, None) for name in (
        "native_dropout", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention", "_efficient_attention_forward", "_flash_attention_forward"))
    if op is not None
}
"""The random ops replayed by these custom ops, and their pairs (the others, by torch's rng_prims, in graphs run op
for op): dropout, and attention with dropout on CUDA devices."""
