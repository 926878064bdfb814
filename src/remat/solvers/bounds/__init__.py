"""remat.solvers.bounds: proved lower bounds on cost from relaxations small enough for large graphs.

A second tier below :mod:`remat.solvers`, used by the checkmate strategy's anneal path.
"""

from ._retention import Retention, overloaded_stages, retention_bound, retention_solution

__all__ = ["Retention", "overloaded_stages", "retention_bound", "retention_solution"]
