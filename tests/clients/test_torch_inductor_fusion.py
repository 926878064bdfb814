"""The fusion guard for Inductor (``_inductor_fusion``): asked of kernels Inductor really lowers, it refuses a fusion
that pulls a kernel forward or holds a read over the graph's peak, and lets the others through."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from remat.clients.torch._inductor_fusion import _Memory  # noqa: E402


def _admits(f: Callable[..., Any], *args: Any, early: str, late: str) -> bool:
    """Whether the guard lets Inductor fuse the kernel of op ``early`` with that of op ``late`` in ``f``'s graph."""
    asked: list[bool] = []

    def before_fusion(kernels: list[Any]) -> list[Any]:
        by_op = {str(origin.target): kernel for kernel in kernels for part in kernel.get_nodes()
                 if part.node is not None for origin in part.node.get_origins()}
        unfused = types.SimpleNamespace(name_to_fused_node={})  # the scheduler before it fuses anything
        asked.append(_Memory(kernels).admits(unfused, by_op[early], by_op[late]))
        return kernels

    torch._dynamo.reset()
    torch.compile(f, options={"_pre_fusion_custom_pass": before_fusion, "fx_graph_cache": False})(*args)
    torch._dynamo.reset()
    return asked == [True]


def test_a_fusion_that_a_kernel_between_reads_from_is_refused():
    # sin and cos share x, but the matmul between reads sin's result: the fused kernel would run at the matmul,
    # pulling cos (and its output) forward
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    assert not _admits(lambda x, w: (x.sin() @ w, x.cos()), x, w, early="aten.sin.default", late="aten.cos.default")
    assert _admits(lambda x: (x.sin(), x.cos()), x, early="aten.sin.default", late="aten.cos.default")


def test_a_fusion_that_holds_a_read_across_the_peak_is_refused():
    # fusing the row sums of x with cos(y) holds x until cos: over the matmul's peak if it runs between them, not
    # if it runs after (x is live at its own reader anyway: held only from the next position)
    x, w, y = torch.randn(160, 256), torch.randn(256, 256), torch.randn(8, 8)

    def across(x, w, y):
        return x.sum(1), (w @ w).sum(), y.cos()

    def before(x, w, y):
        return x.sum(1), y.cos(), (w @ w).sum()

    assert not _admits(across, x, w, y, early="aten.sum.dim_IntList", late="aten.cos.default")
    assert _admits(before, x, w, y, early="aten.sum.dim_IntList", late="aten.cos.default")
