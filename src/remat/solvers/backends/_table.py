"""The one table of solver backends, and how ``auto`` picks among them.

The parent process only reads this table: it checks availability with ``find_spec`` (no engine
is imported), and a backend's engine module is imported in the solver process alone, because
highspy and ortools cannot share a process and a hung engine must be killable.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remat.schedules import BackendUnavailable, UnknownStrategy

from ._model import MilpModel
from ._protocol import BackendResult, Limits, ProgressCallback

__all__ = ["AUTO_ORDER", "BACKENDS", "Backend", "available_backends", "choose_backend", "get_backend"]


@dataclass(frozen=True)
class Backend:
    """A solver engine: ``module`` holds its ``solve(model, limits, on_progress)``.

    ``package`` is the Python package it needs and ``runnable(origin)`` checks anything else it
    needs next to it (CBC's executable); ``lp`` says whether it can solve a continuous model (the
    LP relaxation); ``licence_limit()`` is the largest model (variables or rows) its licence
    allows, None for no limit.
    """

    name: str
    summary: str
    module: str
    package: str
    lp: bool = True
    runnable: Callable[[str | None], bool] = lambda origin: True
    licence_limit: Callable[[], int | None] = lambda: None

    def available(self) -> bool:
        """Whether the engine is installed; cheap, imports nothing."""
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            return False
        return spec is not None and self.runnable(spec.origin)

    def size_limit(self) -> int | None:
        """The licence's limit on variables and on rows, None for none (only Gurobi's pip licence has one)."""
        return self.licence_limit()

    def solve(self, model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
        """Run the engine in this process; call this in a solver process only (see run_backend)."""
        engine = importlib.import_module(self.module)
        result: BackendResult = engine.solve(model, limits, on_progress)
        return result


def _cbc_binary(pulp_origin: str | None) -> str | None:
    """PuLP's bundled CBC executables, or a CBC on PATH."""
    bundled = Path(pulp_origin).parent / "solverdir" / "cbc" if pulp_origin else None
    if bundled is not None and any(bundled.glob("*/*/cbc")):
        return str(bundled)
    return shutil.which("cbc")


@functools.cache
def _gurobi_size_limit() -> int | None:
    """Probe, in a separate process, whether Gurobi's licence limits the model size (0 when Gurobi cannot start)."""
    probe = "from remat.solvers.backends._gurobi import licence_size_limit as f; print(f())"
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError):
        return 0
    text = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "0"
    return None if text == "None" else int(text)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("highs", "HiGHS (highspy): the strongest open-source engine for this MILP.",
                "remat.solvers.backends._highs", "highspy"),
        Backend("cbc", "COIN-OR CBC through PuLP, run as its own process.", "remat.solvers.backends._cbc", "pulp",
                runnable=lambda origin: _cbc_binary(origin) is not None),
        Backend("cpsat", "OR-Tools CP-SAT on the integer-scaled MILP (no LP relaxation).",
                "remat.solvers.backends._cpsat", "ortools", lp=False),
        Backend("scip", "SCIP (pyscipopt).", "remat.solvers.backends._scip", "pyscipopt"),
        Backend("gurobi", "Gurobi (gurobipy); the pip licence stops at 2,000 variables or constraints.",
                "remat.solvers.backends._gurobi", "gurobipy", licence_limit=_gurobi_size_limit),
    )
}

AUTO_ORDER = ("gurobi", "highs", "cbc", "scip", "cpsat")
"""``auto`` takes the first of these that is installed, licensed for the model and able to solve it;
Gurobi only with a full licence, never the pip build's size-limited evaluation licence."""


def get_backend(name: str) -> Backend:
    """The backend called ``name``; UnknownStrategy lists the valid names otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownStrategy(f"Unknown backend {name!r}; choose one of: auto, {', '.join(BACKENDS)}.") from None


def available_backends() -> tuple[str, ...]:
    """Names of the backends whose engines are installed (no engine is imported to find out)."""
    return tuple(name for name, b in BACKENDS.items() if b.available())


def choose_backend(name: str, model: MilpModel) -> Backend:
    """The backend to run ``model`` on: ``name``, or for ``auto`` the best one that can take it.

    Raises BackendUnavailable with the reason when the named engine is missing, cannot solve a
    continuous model, or is licensed for smaller models (Gurobi's pip licence).
    """
    lp = model.relaxation
    if name == "auto":
        for candidate in AUTO_ORDER:
            b = BACKENDS[candidate]
            if b.available() and (b.lp or not lp) and b.size_limit() is None:
                return b
        raise BackendUnavailable(
            f"No solver engine is installed for {'an LP' if lp else 'a MILP'}; install highspy (pip install highspy)."
        )
    b = get_backend(name)
    if not b.available():
        raise BackendUnavailable(f"The {name} backend is not installed (pip install {b.package}); installed: "
                                 f"{', '.join(available_backends()) or 'none'}.")
    if lp and not b.lp:
        raise BackendUnavailable(f"The {name} backend cannot solve LP relaxations; use highs, cbc, scip or gurobi.")
    limit = b.size_limit()
    if limit == 0:
        raise BackendUnavailable(f"The {name} backend cannot start: its licence check failed (try "
                                 f"`python -c 'import gurobipy; gurobipy.Model().optimize()'`).")
    if limit is not None and max(model.n_vars, model.n_rows) > limit:
        raise BackendUnavailable(
            f"The {name} backend has a size-limited licence (at most {limit:,} variables and {limit:,} "
            f"constraints, the pip package's evaluation licence); this model has {model.n_vars:,} variables and "
            f"{model.n_rows:,} constraints. Install a full Gurobi licence or choose another backend "
            f"({', '.join(n for n in available_backends() if n != name) or 'none installed'})."
        )
    return b
