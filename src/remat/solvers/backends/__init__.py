"""remat.solvers.backends: MILP engines behind one narrow protocol, each run in its own process.

A :class:`MilpModel` is plain arrays; :func:`run_backend` solves it with one of :data:`BACKENDS`
in a fresh solver process and returns a :class:`BackendResult`. Engines are imported only there.
"""

from .._supervise import GRACE_S
from ._model import MilpBuilder, MilpModel
from ._process import run_backend
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress, on_stop
from ._table import AUTO_ORDER, BACKENDS, Backend, available_backends, choose_backend, get_backend

__all__ = [
    "AUTO_ORDER",
    "BACKENDS",
    "GRACE_S",
    "Backend",
    "BackendResult",
    "EngineStatus",
    "Limits",
    "MilpBuilder",
    "MilpModel",
    "ProgressCallback",
    "SolverProgress",
    "available_backends",
    "choose_backend",
    "get_backend",
    "on_stop",
    "run_backend",
]
