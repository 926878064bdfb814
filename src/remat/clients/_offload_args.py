"""The command line's offload options, shared by ``remat solve`` and ``remat compare``: how long copies to host
memory and back last (a named device-host link, or numbers in the graph's units) and how much host memory
they may hold."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from remat.schedules import TRANSFER_PROFILES, InvalidRequest, Transfer
from remat.solvers import STRATEGIES

__all__ = ["add_offload_options", "check_offloading", "transfer_of"]

_WITH_PROFILE = ("seconds_per_cost_unit", "latency_s")
_WITH_BANDWIDTH = ("latency",)


def _number(*, positive: bool) -> Callable[[str], float]:
    """An argparse type: a finite number, greater than 0 (``positive``) or at least 0."""

    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be a finite number {'> 0' if positive else '>= 0'}, got {text}")
        return value

    return read


def add_offload_options(parser: argparse.ArgumentParser, *, size: Callable[[str], int]) -> None:
    """``--transfer PROFILE --seconds-per-cost-unit S [--latency-s S]`` or ``--bandwidth B [--latency L]``, and
    ``--host-budget SIZE`` (read by ``size``, the command line's reader of sizes)."""
    group = parser.add_argument_group("offload", "copy times for strategies that move values to host memory and "
                                                 "back: a device-host link, or numbers in the graph's units")
    group.add_argument("--transfer", metavar="PROFILE", choices=sorted(TRANSFER_PROFILES),
                       help=f"a device-host link ({', '.join(sorted(TRANSFER_PROFILES))}); needs "
                            "--seconds-per-cost-unit")
    group.add_argument("--seconds-per-cost-unit", type=_number(positive=True), metavar="S",
                       help="seconds one unit of the graph's cost lasts (0.001 for milliseconds), with --transfer")
    group.add_argument("--latency-s", type=_number(positive=False), metavar="S",
                       help="seconds each copy takes on top of its bytes, with --transfer (default 0)")
    group.add_argument("--bandwidth", type=_number(positive=True), metavar="B",
                       help="bytes copied per cost unit, in the graph's units (instead of --transfer)")
    group.add_argument("--latency", type=_number(positive=False), metavar="L",
                       help="cost units each copy takes on top of its bytes, with --bandwidth (default 0)")
    group.add_argument("--host-budget", type=size, metavar="SIZE",
                       help="host memory the copies may hold at most; units allowed (64GiB)")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _refuse_stray(args: argparse.Namespace, dests: tuple[str, ...], goes_with: str) -> None:
    stray = next((d for d in dests if getattr(args, d) is not None), None)
    if stray is not None:
        raise InvalidRequest(f"{_flag(stray)} goes with {goes_with}.", field="transfer")


def transfer_of(args: argparse.Namespace) -> Transfer | None:
    """The transfer the offload options give (None without them); InvalidRequest in the options' words when
    they do not go together."""
    if args.transfer is not None and args.bandwidth is not None:
        raise InvalidRequest("Give --transfer PROFILE (a device-host link) or --bandwidth B (in the graph's units), "
                             "not both.", field="transfer")
    if args.transfer is not None:
        _refuse_stray(args, _WITH_BANDWIDTH, "--bandwidth; with --transfer, give the latency in seconds (--latency-s)")
        if args.seconds_per_cost_unit is None:
            raise InvalidRequest("--transfer needs --seconds-per-cost-unit S: how many seconds one unit of the "
                                 "graph's cost lasts (0.001 for milliseconds).", field="transfer")
        return Transfer.from_profile(args.transfer, seconds_per_cost_unit=args.seconds_per_cost_unit,
                                     latency_s=args.latency_s or 0.0)
    _refuse_stray(args, _WITH_PROFILE, "--transfer PROFILE")
    if args.bandwidth is not None:
        return Transfer(bandwidth=args.bandwidth, latency=args.latency or 0.0)
    _refuse_stray(args, _WITH_BANDWIDTH, "--bandwidth B")
    return None


def check_offloading(strategies: Sequence[str], transfer: Transfer | None,
                      options: Mapping[str, Any] | None = None) -> None:
    """Refuse, in the options' words, a strategy known here that offloads (with ``options``) when no transfer is
    given (one only a server knows is left for the server to refuse)."""
    if transfer is not None:
        return
    for name in strategies:
        if name in STRATEGIES and STRATEGIES[name].offloads_with(options):
            how = "" if STRATEGIES[name].offloads else f" with --option {STRATEGIES[name].offload_option}=true"
            raise InvalidRequest(f"Strategy {name!r}{how} moves values to host memory and needs copy times: give "
                                 f"--transfer PROFILE --seconds-per-cost-unit S, or --bandwidth B [--latency L] in "
                                 f"the graph's units.", field="transfer")
