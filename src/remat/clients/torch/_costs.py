"""Per-node compute costs of a captured step, in seconds: a roofline estimate or a measurement.

``flops``: each producer's FLOPs (PyTorch's FLOP formulas) and bytes moved (its tensor inputs and
outputs) against a named device profile, ``max(flops / peak, bytes / bandwidth)`` plus a fixed
launch cost; no tensor is allocated. ``measured``: the joint graph runs once on the real tensors
and each producer is timed where it will run (CUDA events on a GPU, the wall clock on the CPU),
the median of a few repetitions. A producer that runs no op of its own (an output of a
multi-output op taken out, the end of the forward) costs nothing in either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from remat.schedules import InvalidRequest

from ._joint import JointGraph
from ._measure import time_call

__all__ = ["COST_MODELS", "DEVICE_PROFILES", "CostModel", "DeviceProfile", "measured_costs", "node_costs",
           "roofline_costs"]


@dataclass(frozen=True)
class DeviceProfile:
    """Peak dense throughput of a device by dtype, its memory bandwidth and a per-op launch cost."""

    name: str
    flops_per_s: Mapping[torch.dtype, float]
    bytes_per_s: float
    launch_s: float

    def peak(self, dtype: torch.dtype) -> float:
        """Peak arithmetic rate (FLOP/s) for ``dtype``; the float32 rate for a dtype the profile does not list."""
        return self.flops_per_s.get(dtype, self.flops_per_s[torch.float32])


def _profile(name: str, fp32: float, half: float, fp64: float, bandwidth: float, launch_s: float) -> DeviceProfile:
    return DeviceProfile(name, {torch.float32: fp32, torch.float16: half, torch.bfloat16: half,
                                torch.float64: fp64}, bandwidth, launch_s)


#: Datasheet peaks (dense, no sparsity; fp32 without TF32, PyTorch's default for matmuls).
#: "cpu" is a small multi-core server: a rough profile, meant for relative costs.
DEVICE_PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (
    _profile("cpu", fp32=1.0e11, half=1.0e11, fp64=5.0e10, bandwidth=2.0e10, launch_s=5e-6),
    _profile("v100", fp32=15.7e12, half=125e12, fp64=7.8e12, bandwidth=900e9, launch_s=5e-6),
    _profile("a100", fp32=19.5e12, half=312e12, fp64=19.5e12, bandwidth=2.039e12, launch_s=4e-6),
    _profile("h100", fp32=67e12, half=989e12, fp64=67e12, bandwidth=3.35e12, launch_s=3e-6),
    _profile("h200", fp32=67e12, half=989e12, fp64=67e12, bandwidth=4.8e12, launch_s=3e-6),
)}

_PROFILES_BY_GPU = (
    (("h200", "gh200"), "h200"),
    (("h100", "h800"), "h100"),
    (("a100", "a800"), "a100"),
    (("v100",), "v100"),
)
"""GPU names (lower case, as torch.cuda.get_device_name gives them) and their profile; other GPUs get "a100". An
H200 has an H100's arithmetic and faster memory (so has the Grace Hopper superchip's GPU); an H800 and an A800 are
the H100 and A100 with a narrower interconnect."""

#: CPU attention kernels use the same FLOP count as the GPU flash kernels.
_FLOP_ALIASES = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: torch.ops.aten._scaled_dot_product_flash_attention,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward:
        torch.ops.aten._scaled_dot_product_flash_attention_backward,
}

CostModel = Callable[[JointGraph, Sequence[torch.Tensor], DeviceProfile], dict[str, float]]
"""``model(joint, args, profile) -> {producer: seconds}``; ``args`` are the joint graph's real inputs."""


def roofline_costs(joint: JointGraph, args: Sequence[torch.Tensor], profile: DeviceProfile) -> dict[str, float]:
    """Seconds per producer from its FLOPs and bytes moved on ``profile`` (``args`` are not used)."""
    nodes = {n.name: n for n in joint.module.graph.nodes}
    costs: dict[str, float] = {}
    for p in joint.producers:
        if not p.runs_an_op:
            continue
        node = nodes[p.name]
        node_args = fx.node.map_arg(node.args, lambda a: a.meta.get("val"))
        node_kwargs = fx.node.map_arg(node.kwargs, lambda a: a.meta.get("val"))
        out = node.meta.get("val")
        tensors = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        dtype = tensors[0].dtype if tensors else torch.float32
        moved = _bytes((node_args, node_kwargs)) + _bytes(out)
        compute = _flops(node.target, node_args, node_kwargs, out) / profile.peak(dtype)
        costs[p.name] = max(compute, moved / profile.bytes_per_s) + profile.launch_s
    return costs


def measured_costs(joint: JointGraph, args: Sequence[torch.Tensor], profile: DeviceProfile, *,
                   repeats: int = 5, warmup: int = 1) -> dict[str, float]:
    """Seconds per producer, timed on the device of ``args`` (the profile is not used).

    Runs the whole joint graph once on real tensors, freeing each value after its last use (the
    memory of an unpatched step), with the random state restored afterwards. On a CPU running
    one intra-op thread, nodes are timed by CPU time, which other processes' load leaves alone.
    """
    cuda = _cuda_devices(args)
    timer = _NodeTimer(joint, device=cuda[0] if cuda else torch.device("cpu"), repeats=repeats, warmup=warmup)
    with torch.no_grad(), torch.random.fork_rng(devices=cuda):
        timer.run(*args)
    return timer.seconds


COST_MODELS: dict[str, CostModel] = {"flops": roofline_costs, "measured": measured_costs}


def node_costs(joint: JointGraph, args: Sequence[torch.Tensor], *, cost_model: str = "flops",
               device: str | None = None) -> tuple[dict[str, float], str]:
    """Costs of every producer under ``cost_model`` and the graph's ``cost_unit`` that says how they were made.

    ``device`` names a profile of DEVICE_PROFILES for the roofline; by default the one matching
    where ``args`` live (a GPU by its name, else "cpu").
    """
    if cost_model not in COST_MODELS:
        raise InvalidRequest(f"Unknown cost model {cost_model!r}; choose one of: {', '.join(COST_MODELS)}.",
                             field="cost_model")
    name = device or _default_profile(args)
    if name not in DEVICE_PROFILES:
        raise InvalidRequest(f"Unknown device profile {name!r}; choose one of: {', '.join(DEVICE_PROFILES)}.",
                             field="device")
    costs = COST_MODELS[cost_model](joint, args, DEVICE_PROFILES[name])
    costs.update({p.name: 0.0 for p in joint.producers if not p.runs_an_op})
    where = name if cost_model == "flops" else _where(args)
    return costs, f"seconds ({cost_model}, {where})"


# -- helpers ------------------------------------------------------------------------------------


class _NodeTimer(fx.Interpreter):
    """Runs the joint graph and times each producer on its real inputs."""

    def __init__(self, joint: JointGraph, *, device: torch.device, repeats: int, warmup: int) -> None:
        super().__init__(joint.module)
        self.producers = {p.name for p in joint.producers if p.runs_an_op}
        self.device = device
        self.repeats = repeats
        self.warmup = warmup
        self.seconds: dict[str, float] = {}

    def run_node(self, n: fx.Node) -> Any:
        if n.name not in self.producers:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        target: Callable[..., Any] = n.target  # type: ignore[assignment]
        self.seconds[n.name] = time_call(lambda: target(*args, **kwargs), device=self.device, repeats=self.repeats,
                                         warmup=self.warmup, cpu_time=torch.get_num_threads() == 1).median_s
        return target(*args, **kwargs)


def _flops(target: Any, args: Any, kwargs: Any, out: Any) -> float:
    packet: Any = getattr(target, "overloadpacket", None)
    packet = _FLOP_ALIASES.get(packet, packet)
    formula = flop_registry.get(packet)
    if formula is None:
        return 0.0
    return float(formula(*args, **kwargs, out_val=out))


def _bytes(tree: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor))


def _cuda_devices(args: Sequence[torch.Tensor]) -> list[torch.device]:
    """The CUDA devices that ``args``' tensors are on, in order of first appearance (a step that
    reads CUDA tensors runs there, whatever CPU tensors come with them)."""
    return list(dict.fromkeys(t.device for t in args if isinstance(t, torch.Tensor) and t.device.type == "cuda"))


def _default_profile(args: Sequence[torch.Tensor]) -> str:
    cuda = _cuda_devices(args)
    if not cuda:
        return "cpu"
    gpu = torch.cuda.get_device_name(cuda[0]).lower()
    return next((profile for names, profile in _PROFILES_BY_GPU if any(n in gpu for n in names)), "a100")


def _where(args: Sequence[torch.Tensor]) -> str:
    cuda = _cuda_devices(args)
    return torch.cuda.get_device_name(cuda[0]) if cuda else "cpu"

