"""One solve in its own process group: the child's entry point and the parent's handle on it.

The child runs :func:`remat.solvers.solve`. Child and parent share a pipe: the child sends
progress and the result; the parent sends ``("stop", reason)``, which a thread of the child turns
into the solve's stop with that reason (even while the main thread is inside a solver's C code), so
the strategy returns its best plan so far and the result's status says why it stopped. When the
parent disappears the child kills its own group, so no solver outlives the runner that started it:
the pipe's end of file tells the child's listening thread at once; and on Linux, where that thread
cannot run (a solver holding the interpreter in C code, a stopped process), the kernel kills the
child when the forkserver it was forked from exits, which the forkserver does as soon as the runner's
process is gone (:func:`_die_with_forkserver`). The engines and helpers the solve started follow when
their input ends, within :data:`~remat.solvers._supervise.GRACE_S`.
The parent stops a child in two steps: the stop message, then SIGKILL to its whole group.

Children come from a forkserver that has imported remat.solvers once (the API process has threads,
so it must not fork itself), which makes starting a solve cheap.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from typing import Any

from remat.schedules import Graph, RematError
from remat.solvers import Stop, StopReason, solve

from ._jobs import SolveSpec

__all__ = ["SolverProcess", "solver_context"]

PR_SET_PDEATHSIG = 1
"""Linux prctl(2) option: the signal the kernel sends this process when its parent exits."""

Message = tuple[str, Any]
"""From the child: ("progress", Progress JSON), ("result", remat.result/v1), ("error", a sentence for the
job's caller) or ("crash", a traceback for the server's log only). From the parent: ("stop", StopReason)."""


def solver_context() -> ForkServerContext:
    """The context solver children come from: a forkserver, started now, that has imported the solvers."""
    ctx = multiprocessing.get_context("forkserver")
    assert isinstance(ctx, ForkServerContext)
    ctx.set_forkserver_preload([__name__])
    forkserver.ensure_running()
    return ctx


class SolverProcess:
    """A running solve in a child process group, seen from the parent."""

    def __init__(self, spec: SolveSpec, graph_doc: Mapping[str, Any], *, threads: int, max_result_bytes: int,
                 ctx: ForkServerContext) -> None:
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self._process = ctx.Process(target=_main, args=(child_conn, asdict(spec), graph_doc, threads, max_result_bytes),
                                    name=f"remat-solve-{spec.key[:12]}")
        self._process.start()
        child_conn.close()
        self._eof = False

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None
        return pid

    def receive(self, timeout_s: float) -> list[Message]:
        """Messages the child sent, waiting up to ``timeout_s`` for the first one."""
        messages: list[Message] = []
        wait = timeout_s
        while not self._eof and self._conn.poll(wait):
            try:
                messages.append(self._conn.recv())
            except (EOFError, OSError):
                self._eof = True
            wait = 0
        if self._eof and not messages:
            self._process.join(timeout_s)
        return messages

    def alive(self) -> bool:
        return not self._eof or self._process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the child to exit."""
        self._process.join(timeout_s)

    def stop(self, reason: StopReason) -> None:
        """Ask the solve to stop for ``reason`` and return its best plan."""
        try:
            self._conn.send(("stop", reason.value))
        except OSError:  # the child is gone
            pass

    def kill(self) -> None:
        """Kill the child and everything it started (SIGKILL to its process group)."""
        self._signal(signal.SIGKILL, group=True)

    def _signal(self, sig: signal.Signals, *, group: bool) -> None:
        try:
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            if group:  # the child has not made its group yet, or it is gone
                self._signal(sig, group=False)
        except PermissionError:  # the group id was reused by an unrelated process
            pass

    def close(self, timeout_s: float = 5.0) -> None:
        """Kill what is left of the child and free the pipe."""
        self._process.join(0 if not self._process.is_alive() else 0.01)
        if self._process.is_alive():
            self.kill()
            self._process.join(timeout_s)
        self._conn.close()


# -- the child ------------------------------------------------------------------------------------


def _main(conn: Connection, spec_doc: dict[str, Any], graph_doc: dict[str, Any], threads: int,
          max_result_bytes: int) -> None:
    os.setpgid(0, 0)
    _die_with_forkserver()
    stop, finished = Stop(), threading.Event()
    threading.Thread(target=_listen, args=(conn, stop, finished), name="parent-watch", daemon=True).start()
    try:
        spec = SolveSpec.from_json(spec_doc)
        result = solve(Graph.from_json(graph_doc), budget=spec.budget, strategy=spec.strategy,
                       backend=spec.backend, time_limit_s=spec.time_limit_s, mip_gap=spec.mip_gap,
                       options=spec.options, transfer=spec.transfer_params, host_budget=spec.host_budget,
                       convergence=spec.convergence_rule,
                       threads=threads, on_progress=lambda p: conn.send(("progress", p.to_json())), stop_event=stop)
        message: Message = _result_message(result.to_json(), max_result_bytes)
    except RematError as e:
        message = ("error", f"{type(e).__name__}: {e}")
    except Exception:
        message = ("crash", traceback.format_exc(limit=20))
    finished.set()
    conn.send(message)


def _die_with_forkserver() -> None:
    """Linux: have the kernel SIGKILL this child when its parent, the forkserver, exits; and let the forkserver
    exit as soon as the runner's process is gone (elsewhere the pipe's end of file alone ends the child).

    A forkserver stays up while any process holds its "alive" pipe: the runner, and every child it forked
    (each inherits the pipe so that it could start processes of its own that way, which a solve never does).
    The child closes its copy, so the runner's exit alone ends the forkserver, and with it this child.
    """
    server = forkserver._forkserver
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        failed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc with prctl: the pipe alone ends the child
        return
    if not failed and os.getppid() != parent:  # the forkserver exited before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _result_message(result: dict[str, Any], max_bytes: int) -> Message:
    """("result", result), or an error saying why a result over ``max_bytes`` of JSON cannot be stored."""
    size = len(json.dumps(result))
    if size <= max_bytes:
        return ("result", result)
    steps = len(result.get("plan") or ())
    return ("error", f"The result is {size} bytes of JSON (a plan of {steps} steps), over this server's limit of "
                     f"{max_bytes} (REMAT_MAX_RESULT_BYTES); solve this graph in-process with `remat solve`, or "
                     f"choose a strategy that recomputes less.")


def _listen(conn: Connection, stop: Stop, finished: threading.Event) -> None:
    """Stop the solve at the parent's stop message; at the end of file the parent is gone, and so must be this solve."""
    try:
        while True:
            kind, reason = conn.recv()
            if kind == "stop":
                stop.request(StopReason(reason))
    except (EOFError, OSError):
        pass
    if not finished.is_set():
        os.killpg(0, signal.SIGKILL)
