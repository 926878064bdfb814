"""Transfer parameters for plans that offload values to host memory and reload them (docs/plans.md, "Offload").

A copy of ``memory`` bytes lasts ``latency + memory / bandwidth`` in the graph's cost unit. The
parameters are given in the graph's units (:class:`Transfer`), or taken from a named device profile
(:data:`TRANSFER_PROFILES`, device-host links), whose bandwidths are in bytes per second: a profile becomes a
:class:`Transfer` only when told how many seconds one cost unit lasts, since a graph's costs may be
seconds, FLOPs or any profiled unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ._errors import InvalidRequest

__all__ = ["TRANSFER_PROFILES", "LinkProfile", "Transfer"]

GB = 1_000_000_000
"""Bytes in a (decimal) gigabyte, the unit of the spec sheets."""


def _finite(value: object, field: str, *, positive: bool) -> float:
    """``value`` as a float, refusing non-numbers, NaN, infinities and (by ``positive``) zero or below."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{field} must be a number, not {value!r}.", field=field)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidRequest(f"{field} must be finite, not {value!r}.", field=field)
    if positive and number <= 0:
        raise InvalidRequest(f"{field} must be greater than 0, not {value!r}.", field=field)
    if number < 0:
        raise InvalidRequest(f"{field} must be 0 or more, not {value!r}.", field=field)
    return number


@dataclass(frozen=True)
class LinkProfile:
    """A device-host link: its effective per-direction bandwidth, the raw figure, and where both come from."""

    name: str
    bandwidth_bytes_per_s: float
    """Effective bandwidth of one direction (device to host, or host to device), bytes per second."""
    raw_bandwidth_bytes_per_s: float
    """The link's nominal bandwidth per direction from its specification, bytes per second."""
    source: str


TRANSFER_PROFILES: Mapping[str, LinkProfile] = MappingProxyType({
    "pcie4-x16": LinkProfile(
        name="pcie4-x16",
        bandwidth_bytes_per_s=25 * GB,
        raw_bandwidth_bytes_per_s=32 * GB,
        source=("PCI-SIG PCIe 4.0: 16 GT/s per lane, 128b/130b encoding, about 32 GB/s per direction on "
                "x16; about 25 GB/s is what pinned-memory copies measure (CUDA bandwidthTest on A100 PCIe), "
                "the rest going to packet and protocol overhead."),
    ),
    "pcie5-x16": LinkProfile(
        name="pcie5-x16",
        bandwidth_bytes_per_s=50 * GB,
        raw_bandwidth_bytes_per_s=64 * GB,
        source=("PCI-SIG PCIe 5.0: 32 GT/s per lane, 128b/130b encoding, about 64 GB/s per direction on "
                "x16; about 50 GB/s is what pinned-memory copies measure (CUDA bandwidthTest on H100 PCIe)."),
    ),
    "nvlink-c2c": LinkProfile(
        name="nvlink-c2c",
        bandwidth_bytes_per_s=450 * GB,
        raw_bandwidth_bytes_per_s=450 * GB,
        source=("NVIDIA Grace Hopper Superchip datasheet and architecture whitepaper: NVLink-C2C gives "
                "900 GB/s in total, both directions together, so 450 GB/s per direction; this is the "
                "specification's figure, not derated by a measurement."),
    ),
})
"""Device-host links by name: per-direction bandwidths in bytes per second, each with its ``source``."""


@dataclass(frozen=True)
class Transfer:
    """How long copies between device and host last, in the graph's units.

    Parameters
    ----------
    bandwidth : float
        Bytes copied per cost unit, in each direction; greater than 0 and finite.
    latency : float
        Cost units every copy takes on top of its bytes; 0 or more and finite.

    Examples
    --------
    >>> t = Transfer(bandwidth=100, latency=0.5)
    >>> t.duration(400)
    4.5
    >>> Transfer.from_profile("pcie5-x16", seconds_per_cost_unit=1e-3).bandwidth   # bytes per millisecond
    50000000.0
    """

    bandwidth: float
    latency: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "bandwidth", _finite(self.bandwidth, "transfer.bandwidth", positive=True))
        object.__setattr__(self, "latency", _finite(self.latency, "transfer.latency", positive=False))

    def duration(self, nbytes: int) -> float:
        """Cost units a copy of ``nbytes`` lasts: ``latency + nbytes / bandwidth``."""
        return self.latency + nbytes / self.bandwidth

    @classmethod
    def from_profile(cls, name: str, *, seconds_per_cost_unit: float, latency_s: float = 0.0) -> Transfer:
        """The transfer of device profile ``name`` for a graph whose cost unit lasts ``seconds_per_cost_unit``.

        The profile's bandwidth (bytes per second) becomes bytes per cost unit; ``latency_s`` (seconds,
        default 0: the profiles give bandwidths only) becomes cost units. An unknown name raises
        InvalidRequest listing the known ones.
        """
        profile = TRANSFER_PROFILES.get(name) if isinstance(name, str) else None
        if profile is None:
            known = ", ".join(sorted(TRANSFER_PROFILES))
            raise InvalidRequest(f"No device profile named {name!r}; known profiles: {known}.",
                                 field="transfer.profile")
        unit = _finite(seconds_per_cost_unit, "seconds_per_cost_unit", positive=True)
        latency = _finite(latency_s, "transfer.latency_s", positive=False)
        return cls(bandwidth=profile.bandwidth_bytes_per_s * unit, latency=latency / unit)

    def to_json(self) -> dict[str, float]:
        """The ``transfer`` object of a request or result, in the graph's units."""
        return {"bandwidth": self.bandwidth, "latency": self.latency}

    @classmethod
    def from_json(cls, doc: Any) -> Transfer:
        """Read a request's ``transfer``: ``{"bandwidth": B, "latency": L}`` in the graph's units (latency
        optional, default 0), or ``{"profile": NAME, "seconds_per_cost_unit": S}`` (``latency_s`` optional).

        Anything else raises InvalidRequest saying which form is expected.
        """
        if not isinstance(doc, Mapping):
            raise InvalidRequest("'transfer' must be an object: {\"bandwidth\": ..., \"latency\": ...} in the graph's "
                                 "units, or {\"profile\": NAME, \"seconds_per_cost_unit\": ...}.", field="transfer")
        forms = {"profile": {"profile", "seconds_per_cost_unit", "latency_s"}, "units": {"bandwidth", "latency"}}
        form = "profile" if "profile" in doc else "units"
        unknown = sorted(set(doc) - forms[form])
        if unknown:
            raise InvalidRequest(f"Unknown field {unknown[0]!r} in 'transfer'; it takes "
                                 f"{', '.join(sorted(forms[form]))}.", field="transfer")
        if form == "profile":
            if "seconds_per_cost_unit" not in doc:
                raise InvalidRequest("A transfer profile needs 'seconds_per_cost_unit': how many seconds one unit of "
                                     "the graph's cost lasts (0.001 for milliseconds).",
                                     field="transfer.seconds_per_cost_unit")
            return cls.from_profile(doc["profile"], seconds_per_cost_unit=doc["seconds_per_cost_unit"],
                                    latency_s=doc.get("latency_s", 0.0))
        if "bandwidth" not in doc:
            raise InvalidRequest("'transfer' needs 'bandwidth' (bytes per cost unit) or a 'profile'.",
                                 field="transfer.bandwidth")
        return cls(bandwidth=doc["bandwidth"], latency=doc.get("latency", 0.0))
