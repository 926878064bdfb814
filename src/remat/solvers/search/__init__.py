"""remat.solvers.search: local search over schedules of fixed order (the annealer and its timeline).

A second tier below :mod:`remat.solvers`, used by the checkmate strategy's anneal paths; tests and
benchmarks may import these names.
"""

from ._annealer import Annealer, anneal, timeline_from_schedule
from ._timeline import Timeline

__all__ = ["Annealer", "Timeline", "anneal", "timeline_from_schedule"]
