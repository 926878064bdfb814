"""remat.schedules: the data model (graph, plan, schedule), the simulator and memory layout.

The formats and the simulator's semantics are in docs/graphs.md and docs/plans.md.

Everything here is plain Python and NumPy; other packages build on it and never the reverse.
"""

from ._batched import BatchedGraph
from ._budget import BINARY_UNITS, MAX_BUDGET_RATIO, byte_unit, format_size, parse_size, resolve_budget
from ._errors import (
    BackendUnavailable,
    InvalidGraph,
    InvalidPlan,
    InvalidRequest,
    InvalidResult,
    InvalidSchedule,
    RematError,
    SolverFailed,
    StrategyNotApplicable,
    UnknownStrategy,
)
from ._graph import GRAPH_FORMAT, MAX_TOTAL_BYTES, Graph, GraphLimits, Kind, Node
from ._layout import Buffer, Layout, layout_plan
from ._numbers import whole_number
from ._plan import Op, Plan, checkpoint_all_plan
from ._schedule import (
    Schedule,
    ScheduleEntries,
    checkpoint_all_schedule,
    plan_from_schedule,
    plan_peak_and_cost,
    recompute_closure,
)
from ._simulate import Simulation, Span, Timing, simulate, simulate_schedule
from ._transfer import TRANSFER_PROFILES, LinkProfile, Transfer
from ._values import ModuleValues, PlanValue, PlanValues, by_module, has_sources

__all__ = [
    "BINARY_UNITS",
    "GRAPH_FORMAT",
    "MAX_BUDGET_RATIO",
    "MAX_TOTAL_BYTES",
    "TRANSFER_PROFILES",
    "BackendUnavailable",
    "BatchedGraph",
    "Buffer",
    "Graph",
    "GraphLimits",
    "InvalidGraph",
    "InvalidPlan",
    "InvalidRequest",
    "InvalidResult",
    "InvalidSchedule",
    "Kind",
    "Layout",
    "LinkProfile",
    "ModuleValues",
    "Node",
    "Op",
    "Plan",
    "PlanValue",
    "PlanValues",
    "RematError",
    "Schedule",
    "ScheduleEntries",
    "Simulation",
    "SolverFailed",
    "Span",
    "StrategyNotApplicable",
    "Timing",
    "Transfer",
    "UnknownStrategy",
    "by_module",
    "byte_unit",
    "checkpoint_all_plan",
    "checkpoint_all_schedule",
    "format_size",
    "has_sources",
    "layout_plan",
    "parse_size",
    "plan_from_schedule",
    "plan_peak_and_cost",
    "recompute_closure",
    "resolve_budget",
    "simulate",
    "simulate_schedule",
    "whole_number",
]
