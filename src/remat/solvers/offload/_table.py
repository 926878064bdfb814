"""The engine-free offload strategies, in the registry's order."""

from __future__ import annotations

from .._strategy import Strategy, check_training_graph
from ._all import offload_all
from ._window import WINDOW, WINDOW_OPTION, offload_window

__all__ = ["OFFLOAD_BASELINES"]

OFFLOAD_BASELINES: tuple[Strategy, ...] = (
    Strategy("offload-all", "Every forward value the backward reads goes to the host, the computation waiting for "
             "each copy, and comes back just in time.",
             offload_all, check=check_training_graph, offloads=True),
    Strategy("offload-window", "The out-of-core seed's adaptive window: offloads only what the budget needs, "
             "waits for those copies where it needs their memory, reloads as late as copies allow; window searched.",
             offload_window, knob=WINDOW, options={WINDOW: WINDOW_OPTION}, offloads=True),
)
"""Every engine-free strategy that offloads (kind ``baseline``, ``offloads`` set)."""
