"""A helper process of the anneal path: ``python -m remat.solvers._portfolio_worker``.

Reads one request frame from stdin, ``(graph document, budget, seed, time limit, tasks)``, runs the
tasks in order and writes what they find as frames to the original stdout:

- ``baselines``: ``("baseline", name, R, S, cost)`` for the cheapest baseline that fits;
- ``bound``: ``("bound", value, how)`` for the LP bound of :mod:`._bound` (within
  :data:`LP_SHARE` of the time limit), then the MIP bound when the relaxation is small enough
  (within :data:`MIP_SHARE`);
- ``anneal``: ``("best", cost, extras)`` for each new best of an annealing chain.

``("log", line)`` frames carry notes and failures. Any frame on stdin, or its end (the parent is
gone), stops the work; the process then exits.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from remat.schedules import Graph

from ._anneal import Annealer
from ._bound import retention_bound
from ._context import SolveContext
from ._fallback import best_baseline
from .backends._process import read_frame, write_frame

__all__ = ["LP_SHARE", "MIP_COLUMNS", "MIP_SHARE", "main"]

LP_SHARE = 0.5
"""Share of the time limit the bound may spend on its LP (an LP not solved by then proves nothing)."""

MIP_SHARE = 0.25
"""Share of the time limit the bound may spend as a MIP once its LP is solved."""

MIP_COLUMNS = 300_000
"""Largest relaxation (in columns) worth solving as a MIP."""

Send = Callable[[tuple[Any, ...]], None]


def main() -> None:
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything an engine prints goes to stderr, not into the frames
    requests = sys.stdin.buffer
    doc, budget, seed, time_limit_s, tasks = read_frame(requests)
    ctx = SolveContext(time_limit_s=time_limit_s, threads=1)
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            write_frame(protocol, message)

    threading.Thread(target=_watch, args=(requests, ctx), daemon=True).start()
    try:
        run_tasks(Graph.from_json(doc), budget, seed, ctx, tasks, send)
    except Exception:  # every failure goes back to the parent as a note
        send(("log", f"helper {seed} failed: {traceback.format_exc(limit=3)}"))
    finally:
        protocol.close()
        os._exit(0)


def run_tasks(graph: Graph, budget: int, seed: int, ctx: SolveContext, tasks: tuple[str, ...], send: Send) -> None:
    """Run ``tasks`` in order until ``ctx`` stops, sending what they find."""
    started = time.monotonic()
    if "baselines" in tasks:
        best = best_baseline(graph, budget, ctx)
        if best is not None:
            send(("baseline", best.name, best.schedule.R, best.schedule.S, best.cost))
        send(("log", f"baselines done after {time.monotonic() - started:.1f} s"))
    if "bound" in tasks and not ctx.stopped():
        _bounds(graph, budget, ctx, send)
    if "anneal" in tasks and not ctx.stopped():
        Annealer(graph, budget, seed=seed).run(ctx, on_best=lambda cost, extras: send(("best", cost, extras)))


def _bounds(graph: Graph, budget: int, ctx: SolveContext, send: Send) -> None:
    lp = retention_bound(graph, budget, time_limit_s=min(ctx.remaining_s(), LP_SHARE * ctx.time_limit_s))
    if lp is not None:
        send(("bound", lp, "retention LP"))
    columns = 2 * sum(max(0, us[-1] - v - len(us)) for v, us in enumerate(graph.users) if us)
    share = min(ctx.remaining_s(), MIP_SHARE * ctx.time_limit_s)
    if columns <= MIP_COLUMNS and share > 1.0 and not ctx.stopped():
        mip = retention_bound(graph, budget, time_limit_s=share, integral=True)
        if mip is not None and (lp is None or mip > lp):
            send(("bound", mip, "retention MIP"))


def _watch(requests: IO[bytes], ctx: SolveContext) -> None:
    """Stop at the first frame on stdin or at its end."""
    try:
        read_frame(requests)
    except (EOFError, OSError):
        pass
    ctx.stop_event.set()


if __name__ == "__main__":
    main()
