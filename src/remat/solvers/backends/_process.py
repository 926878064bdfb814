"""Run a backend in its own solver process, stream its progress, stop it, kill it if it hangs.

The parent starts ``python -m remat.solvers.backends._child`` in a new session (its own process
group, so CBC's subprocess goes with it), sends the request as a pickled frame on the child's
stdin and reads length-prefixed pickled frames (progress, result, error) from its stdout; engine
logs arrive on its stderr and are kept as a tail. To stop, the parent first sends a stop frame,
which the child turns into the engine's own interrupt (the engine keeps its incumbent and
returns), and kills the whole process group if no result comes within
:data:`~remat.solvers._supervise.GRACE_S` (a :class:`~remat.solvers._supervise.StopThenKill`). Closing
the child's stdin (the parent died) stops and ends the child too.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from remat.schedules import BackendUnavailable, SolverFailed

from .._supervise import StopThenKill
from ._model import MilpModel
from ._protocol import BackendResult, EngineStatus, Limits, ProgressCallback, SolverProgress
from ._table import Backend

__all__ = ["child_protocol", "read_frame", "run_backend", "write_frame"]

_HEADER = struct.Struct("!Q")


def child_protocol() -> tuple[IO[bytes], Callable[[Any], None]]:
    """In a child process: its request stream, and a thread-safe sender of frames to its stdout.

    The sender keeps the original stdout; fd 1 then goes to stderr, so that nothing an engine
    prints can mix into the frames.
    """
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            write_frame(protocol, message)

    return sys.stdin.buffer, send


def write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message; EOFError when the stream ends."""
    header = _read_exactly(stream, _HEADER.size)
    return pickle.loads(_read_exactly(stream, _HEADER.unpack(header)[0]))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def run_backend(backend: Backend, model: MilpModel, limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    """Solve ``model`` with ``backend`` in a fresh solver process.

    ``limits.stop`` (set by another thread, e.g. on cancel) and ``limits.time_limit_s`` end the
    run; either way the result carries the best solution the engine reported. Incumbents are
    passed to ``on_progress`` as they arrive, so even a killed engine's last incumbent is kept:
    the returned result then has status FEASIBLE, ``x`` None and ``watched`` set.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "remat.solvers.backends._child"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    messages: queue.Queue[Any] = queue.Queue()
    tail: deque[str] = deque(maxlen=40)
    readers = [
        threading.Thread(target=_pump_frames, args=(proc.stdout, messages), daemon=True),
        threading.Thread(target=_pump_lines, args=(proc.stderr, tail), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        write_frame(proc.stdin, ("solve", backend.name, model, limits.picklable()))
        return _supervise(backend, model, proc, messages, tail, limits, on_progress)
    except BrokenPipeError:
        raise SolverFailed(f"The {backend.name} solver process ended at start: {' | '.join(tail)}") from None
    finally:
        _kill(proc)
        for reader in readers:
            reader.join(timeout=1.0)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


def _supervise(backend: Backend, model: MilpModel, proc: subprocess.Popen[bytes], messages: queue.Queue[Any],
               tail: deque[str], limits: Limits, on_progress: ProgressCallback) -> BackendResult:
    stopper = StopThenKill.within(limits.time_limit_s, lambda _: _ask_to_stop(proc), lambda: _kill(proc))
    best: SolverProgress | None = None
    bound: float | None = None
    while True:
        try:
            message = messages.get(timeout=0.05)
        except queue.Empty:
            message = None
        if message is not None:
            kind = message[0]
            if kind == "progress":
                progress: SolverProgress = message[1]
                if progress.bound is not None and np.isfinite(progress.bound):
                    bound = progress.bound if bound is None else max(bound, progress.bound)
                if progress.watched is not None and (best is None or _objective(progress) <= _objective(best)):
                    best = progress
                on_progress(progress)
            elif kind == "result":
                result: BackendResult = message[1]
                if result.x is not None and model.watch is not None:
                    result.watched = result.x[model.watch]
                result.log[:0] = list(tail)
                return result
            elif kind == "error":
                _, name, text = message
                if name == "BackendUnavailable":
                    raise BackendUnavailable(text)
                raise SolverFailed(f"The {backend.name} backend failed: {text}")
            else:  # the child's stdout closed: it exited or was killed
                return _without_result(backend, proc, best, bound, tail)
        if limits.stop.is_set():
            stopper.stop()
        if stopper.tend():
            return _without_result(backend, proc, best, bound, [*tail, f"{backend.name} killed after a stop request"])


def _objective(progress: SolverProgress) -> float:
    return np.inf if progress.objective is None else progress.objective


def _without_result(backend: Backend, proc: subprocess.Popen[bytes], best: SolverProgress | None,
                    bound: float | None, tail: Any) -> BackendResult:
    """What is left when the process ended before sending a result: its last incumbent, if any."""
    log = list(tail)
    if best is None:
        code = proc.poll()
        if code not in (None, -signal.SIGKILL):
            raise SolverFailed(f"The {backend.name} solver process exited with code {code}: {' | '.join(log[-5:])}")
        return BackendResult(EngineStatus.NO_SOLUTION, bound=bound, log=log)
    return BackendResult(EngineStatus.FEASIBLE, objective=best.objective, bound=bound, watched=best.watched, log=log)


def _pump_frames(stream: IO[bytes], messages: queue.Queue[Any]) -> None:
    try:
        while True:
            messages.put(read_frame(stream))
    except (EOFError, OSError, ValueError, pickle.UnpicklingError):
        messages.put(("eof",))


def _pump_lines(stream: IO[bytes], tail: deque[str]) -> None:
    try:
        for line in stream:
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                tail.append(text)
    except (OSError, ValueError):
        pass


def _ask_to_stop(proc: subprocess.Popen[bytes]) -> None:
    """Send the stop frame: the child turns it into the engine's own interrupt."""
    try:
        write_frame(proc.stdin, ("stop",))  # type: ignore[arg-type]
    except (BrokenPipeError, OSError):
        pass


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the solver's whole process group (the engine and anything it started)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that survives SIGKILL
        pass
