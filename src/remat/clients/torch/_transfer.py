"""The device-host link a plan may copy values over, as the user names it and as a graph needs it.

A user names a link (``"pcie5-x16"``, one of :data:`remat.schedules.TRANSFER_PROFILES`), asks for
the link of the CUDA device the step runs on (``"auto"``), or gives the transfer parameters outright
(a :class:`~remat.schedules.Transfer` in the graph's units, or its JSON form). A named link is in
bytes per second; the client's graphs cost their nodes in seconds, so it converts as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import torch

from remat.schedules import TRANSFER_PROFILES, Graph, InvalidRequest, Transfer

from ._joint import JointGraph

__all__ = ["AUTO", "TransferSpec", "check_transfer", "device_link", "transfer_for"]

TransferSpec: TypeAlias = Transfer | str | Mapping[str, Any] | None
"""What ``rematerialize(transfer=...)`` takes: a link's name, ``"auto"``, a Transfer or its JSON form."""

AUTO = "auto"
"""The link of the CUDA device the step runs on (:func:`device_link`)."""

_LINKS_BY_GPU = (
    (("gh200", "gb200"), "nvlink-c2c"),
    (("h100", "h200", "h800", "b100", "b200"), "pcie5-x16"),
)
"""GPU names (lower case, as torch.cuda.get_device_name gives them) and the link to their host; other GPUs get
pcie4-x16. The Grace superchips' GPU reaches its CPU over NVLink-C2C; Hopper and Blackwell boards sit on PCIe 5."""


def check_transfer(spec: TransferSpec) -> TransferSpec:
    """``spec`` checked before anything is captured: a Transfer for the JSON form, a known link's name, or None."""
    if spec is None or isinstance(spec, Transfer):
        return spec
    if isinstance(spec, Mapping):
        return Transfer.from_json(spec)
    if isinstance(spec, str) and (spec == AUTO or spec in TRANSFER_PROFILES):
        return spec
    raise InvalidRequest(f"transfer must be a link ({', '.join(TRANSFER_PROFILES)}), 'auto' for the link of the "
                         f"CUDA device, or a Transfer in the graph's units; got {spec!r}.", field="transfer")


def transfer_for(spec: TransferSpec, graph: Graph, joint: JointGraph) -> Transfer | None:
    """The transfer parameters of a checked ``spec`` in ``graph``'s units (None when no copies are allowed)."""
    if spec is None or isinstance(spec, Transfer):
        return spec
    assert isinstance(spec, str), "check_transfer first"
    name = device_link(_device(joint)) if spec == AUTO else spec
    if not graph.cost_unit.startswith("seconds"):
        raise InvalidRequest(f"The link {name!r} is given in bytes per second and this graph's costs are in "
                             f"{graph.cost_unit!r}: give transfer=Transfer(bandwidth=..., latency=...) in its units, "
                             f"or {{'profile': {name!r}, 'seconds_per_cost_unit': ...}}.", field="transfer")
    return Transfer.from_profile(name, seconds_per_cost_unit=1.0)


def device_link(device: torch.device) -> str:
    """The link between a CUDA device and its host, from the device's name."""
    if device.type != "cuda":
        raise InvalidRequest(f"transfer='auto' picks the link of a CUDA device, and this step runs on {device.type}; "
                             f"name a link ({', '.join(TRANSFER_PROFILES)}) or give a Transfer.", field="transfer")
    gpu = torch.cuda.get_device_name(device).lower()
    return next((link for names, link in _LINKS_BY_GPU if any(n in gpu for n in names)), "pcie4-x16")


def _device(joint: JointGraph) -> torch.device:
    """Where the step runs: the device of its first input not on the CPU, else the CPU."""
    for node in joint.module.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type != "cpu":
            return val.device
    return torch.device("cpu")
