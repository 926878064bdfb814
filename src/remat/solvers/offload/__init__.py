"""remat.solvers.offload: strategies whose plans copy values to host memory and back.

Their plans have ``offload``, ``reload`` and ``wait`` statements and no schedule form; they need the request's
transfer parameters (:class:`remat.schedules.Transfer`). :data:`OFFLOAD_BASELINES` lists the
engine-free ones; the registry lists them after the baselines. :func:`checkmate_offload` is the joint
strategy (keep, recompute or offload per value), a solver strategy of the registry; :func:`offload_to_fit`
moves a plan's idle values to the host until its peak fits a budget, :func:`offload_instead_of_recomputing`
replaces a plan's recomputations by such moves where they cost less. :func:`insert_transfers` adds
transfers to any plan without them, at the gaps :func:`idle_intervals` finds.
"""

from ._all import offload_all, offload_all_plan
from ._checkmate_offload import JOINT_MILP_NODES, LADDER_RUNGS, checkmate_offload, checkmate_or_offload
from ._checkmate_offload import OPTIONS as JOINT_OPTIONS
from ._insert import Computes, IdleInterval, idle_intervals, insert_transfers
from ._instead import offload_instead_of_recomputing
from ._squeeze import offload_to_fit
from ._table import OFFLOAD_BASELINES
from ._window import WINDOW, WindowPlanner, offload_window

__all__ = [
    "JOINT_MILP_NODES",
    "JOINT_OPTIONS",
    "LADDER_RUNGS",
    "OFFLOAD_BASELINES",
    "WINDOW",
    "Computes",
    "IdleInterval",
    "WindowPlanner",
    "checkmate_offload",
    "checkmate_or_offload",
    "idle_intervals",
    "insert_transfers",
    "offload_all",
    "offload_all_plan",
    "offload_instead_of_recomputing",
    "offload_to_fit",
    "offload_window",
]
