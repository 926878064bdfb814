"""The command line's time options, shared by ``remat solve``, ``remat compare`` and ``remat max-batch``: a solve
stops once its plan has stopped improving (:data:`remat.solvers.DEFAULT_CONVERGENCE`), its time limit a cap."""

from __future__ import annotations

import argparse

from remat.solvers import DEFAULT_CONVERGENCE, Convergence

__all__ = ["add_time_options", "convergence_of"]


def add_time_options(p: argparse.ArgumentParser, *, default: float | None, what: str) -> None:
    """``--time-limit`` (seconds per ``what``; ``default`` None leaves it to a server) and ``--run-to-limit``."""
    said = "the server's default" if default is None else f"{default:g}"
    p.add_argument("--time-limit", type=float, default=default,
                   help=f"seconds per {what} at most (default {said}); a solve stops sooner once its plan has "
                        f"improved by less than {100 * DEFAULT_CONVERGENCE.tolerance:g} %% in "
                        f"{DEFAULT_CONVERGENCE.window_s:g} s, longer while far from its lower bound (up to "
                        f"{DEFAULT_CONVERGENCE.window_for(None):g} s)")  # argparse %-formats help strings
    p.add_argument("--run-to-limit", action="store_true",
                   help="run every solve to its time limit (or a proof) instead of stopping once it has converged")


def convergence_of(args: argparse.Namespace) -> Convergence | None:
    """The rule the solves stop by: the default one, or None with ``--run-to-limit``."""
    return None if args.run_to_limit else DEFAULT_CONVERGENCE
