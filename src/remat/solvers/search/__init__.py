"""remat.solvers.search: local search over schedules of fixed order (the annealer and its timeline), and its
first plans on deep graphs: composed from one solve of a repeated block, or read off a retention relaxation.

A second tier below :mod:`remat.solvers`, used by the checkmate strategy's anneal paths; tests and
benchmarks may import these names.
"""

from ._annealer import Annealer, anneal, timeline_from_schedule
from ._repeated import ShortGraph, compose, composed_start, shorten
from ._retained import retained_plan
from ._timeline import Timeline

__all__ = ["Annealer", "ShortGraph", "Timeline", "anneal", "compose", "composed_start", "retained_plan",
           "shorten", "timeline_from_schedule"]
