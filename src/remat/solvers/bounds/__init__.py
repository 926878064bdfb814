"""remat.solvers.bounds: proved lower bounds on cost from relaxations small enough for large graphs.

A second tier below :mod:`remat.solvers`, used by the checkmate strategy's anneal path.
"""

from ._retention import overloaded_stages, retention_bound

__all__ = ["overloaded_stages", "retention_bound"]
