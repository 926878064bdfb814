"""Dropout computed again with the numbers it drew the first time, as ops any compiler runs as they are.

A plan may compute a random op more than once; each computation must draw what the first drew, as the
unpatched step did once. torch's ``run_and_save_rng_state`` / ``run_with_rng_state`` do that in graphs
run op for op, but Inductor cannot compile them on the CPU (their fake version hands back the real
generator state). Dropout, the random op of the models people train, is replayed instead by two
custom ops that Inductor calls as they are: :func:`dropout_saving_state` saves the generator's state
and draws, as the first computation; :func:`dropout_with_state` draws again from that state and puts
the generator back where it was, so the step's later random ops draw what they would have.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["REPLAYED", "SAVING_STATE", "WITH_STATE", "dropout_saving_state", "dropout_with_state"]


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


@torch.library.custom_op("remat::dropout_saving_state", mutates_args=())
def dropout_saving_state(input: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                      torch.Tensor]:
    """``native_dropout(input, p, train)``'s output and mask, and the generator's state it drew from."""
    state = _state(input.device)
    out, mask = torch.ops.aten.native_dropout.default(input, p, train)
    return out, mask, state


@dropout_saving_state.register_fake
def _(input: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    size = _state(input.device).numel()  # the real generator's: its state is a fixed number of bytes
    return (torch.empty_like(input), torch.empty_like(input, dtype=torch.bool),
            input.new_empty((size,), dtype=torch.uint8, device="cpu"))


@torch.library.custom_op("remat::dropout_with_state", mutates_args=())
def dropout_with_state(state: torch.Tensor, input: torch.Tensor, p: float,
                       train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``native_dropout(input, p, train)`` drawn from ``state``, leaving the generator as it was."""
    with _generator_at(state, input.device):
        return torch.ops.aten.native_dropout.default(input, p, train)


@dropout_with_state.register_fake
def _(state: torch.Tensor, input: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(input), torch.empty_like(input, dtype=torch.bool)


REPLAYED = {torch.ops.aten.native_dropout.default}
"""The random ops replayed by these custom ops (the others, by torch's rng_prims, in graphs run op for op)."""

SAVING_STATE = torch.ops.remat.dropout_saving_state.default
WITH_STATE = torch.ops.remat.dropout_with_state.default
"""The two ops as graphs call them."""
