"""Child processes, and the one way a parent and its child talk: frames of small dataclasses.

:func:`spawn` starts a child that runs ``entry(parent, request)`` and returns the parent's
:class:`Child`. The two share one connection of length-prefixed pickled frames (a
:class:`multiprocessing.connection.Connection` over a socket pair), and every message is a small
frozen dataclass that readers dispatch on by class (``match``). The first frame, :class:`Launch`,
carries the entry and its request, objects such as a validated :class:`~remat.schedules.Graph`
included (pickled, so not checked again). The child answers :class:`Started`, then sends what its
entry sends, or :class:`ChildFailed` when the entry raises. The parent may send a
:class:`StopRequest`, which the child's watchdog turns into :attr:`Parent.stop` with its reason,
and messages the entry handles (:meth:`Parent.on`).

A child is a fresh interpreter (engines that cannot share a process, helpers), or is forked from a
forkserver that has imported the solvers (a start then costs a fork rather than 0.25 s of imports:
the service's solves). With ``own_group`` it leads a process group of its own, which
:meth:`Child.kill` kills whole (CBC's executable goes with its engine); otherwise it stays in its
parent's group, so that killing the parent's group takes it too.

No child outlives its parent. Its watchdog thread reads the parent's frames; at their end (the parent
is gone) it stops the work and, ``grace_s`` later, ends the child and its group. A child forked from a
forkserver lets the forkserver exit as soon as the process that asked for the child is gone, and on
Linux the kernel kills it when the forkserver exits (``PR_SET_PDEATHSIG``), for when that thread
cannot run (a solver holding the interpreter in C code, a stopped process); the children it started
in turn see their input end. (A fresh child gets no such signal: killed at once, it could not kill
its group, and CBC's executable would run on.)
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import forkserver as _forkserver
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from queue import SimpleQueue
from typing import IO, Any, Generic, TypeVar

from ._context import Stop, StopReason
from ._supervise import GRACE_S

__all__ = ["Child", "ChildFailed", "Parent", "StopRequest", "spawn"]

R = TypeVar("R")
M = TypeVar("M")

PR_SET_PDEATHSIG = 1
"""Linux prctl(2) option: the signal the kernel sends this process when its parent exits."""

_MAIN = "from remat.solvers._children import _main; _main()"
"""What a fresh child runs (``python -c``; ``-m`` would define this module's classes twice)."""


@dataclass(frozen=True)
class Launch(Generic[R]):
    """The parent's first frame: what the child runs, whether it leads a group, and its grace once orphaned."""

    entry: Callable[[Parent, R], None]
    request: R
    own_group: bool
    grace_s: float


@dataclass(frozen=True)
class Started:
    """From the child: it has read its launch frame (a child that never sends this never started)."""


@dataclass(frozen=True)
class StopRequest:
    """From the parent: stop the work and send what it has; ``reason`` None means it is no longer needed."""

    reason: StopReason | None = None


@dataclass(frozen=True)
class ChildFailed:
    """From the child: its entry raised ``name: text``; the traceback is for a log, not for a caller."""

    name: str
    text: str
    traceback: str


class Child:
    """A running child process, seen from its parent: send, receive, stop, kill, close.

    A message to the child is pickled at once, in the sender's thread (it may change afterwards), and
    the frame goes out through a queue and a thread of their own, so that sending never waits for the
    child (a large request blocks until a new process has started and reads it).
    """

    def __init__(self, process: subprocess.Popen[bytes] | BaseProcess, conn: Connection, launch: Launch[Any],
                 output_lines: int = 0) -> None:
        self._process, self._conn, self._own_group = process, conn, launch.own_group
        self.started = False
        """Whether the child has read its launch frame."""
        self.ended = False
        """Whether the child's frames have ended (it exited, or is about to)."""
        self.tail: deque[str] = deque(maxlen=output_lines or None)
        """The last lines the child printed (when spawned with ``output_lines``)."""
        self._outbox: SimpleQueue[bytes | None] = SimpleQueue()
        self.send(launch)
        self._threads = [threading.Thread(target=self._write, daemon=True)]
        output = process.stdout if isinstance(process, subprocess.Popen) else None
        if output is not None:
            self._threads.append(threading.Thread(target=self._keep_tail, args=(output,), daemon=True))
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None
        return pid

    @property
    def exitcode(self) -> int | None:
        """The child's exit status (negative: the signal that ended it); None while it runs."""
        process = self._process
        return process.poll() if isinstance(process, subprocess.Popen) else process.exitcode

    def send(self, message: object) -> None:
        """Queue ``message`` for the child (dropped once the child is gone), pickled now, as it is now."""
        self._outbox.put(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def stop(self, reason: StopReason | None = None) -> None:
        """Ask the child to stop (for ``reason``) and send what it has."""
        self.send(StopRequest(reason))

    def receive(self, timeout_s: float | None) -> list[Any]:
        """The messages the child sent, waiting up to ``timeout_s`` (None: without limit) for the first.

        Once the child's frames have ended (:attr:`ended`) this waits up to ``timeout_s`` for it to exit.
        """
        messages: list[Any] = []
        wait = timeout_s
        while not self.ended and self._conn.poll(wait):
            try:
                message = self._conn.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                self.ended = True
                break
            if isinstance(message, Started):
                self.started = True
            else:
                messages.append(message)
            wait = 0
        if self.ended and not messages:
            self.wait(timeout_s)
        return messages

    def alive(self) -> bool:
        """True until the child's frames have ended and it has exited."""
        return not self.ended or self.exitcode is None

    def wait(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` for the child to exit; True when it has."""
        process = self._process
        if isinstance(process, subprocess.Popen):
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return False
        else:
            process.join(timeout_s)
        return self.exitcode is not None

    def kill(self) -> None:
        """SIGKILL the child, with everything in its group when it leads one."""
        try:
            if self._own_group:
                os.killpg(self.pid, signal.SIGKILL)
            elif self.exitcode is None:
                os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # its group is gone, or not made yet
            if self.exitcode is None:
                os.kill(self.pid, signal.SIGKILL)
        except PermissionError:  # the group id was taken by an unrelated process
            pass

    def close(self, timeout_s: float = 5.0) -> None:
        """Kill what is left of the child, reap it, and free the connection and threads."""
        if not self.wait(0.01):
            self.kill()
            self.wait(timeout_s)
        self._outbox.put(None)
        for thread in self._threads:
            thread.join(1.0)
        self._conn.close()
        if isinstance(self._process, subprocess.Popen) and self._process.stdout is not None:
            self._process.stdout.close()

    def _write(self) -> None:
        while (frame := self._outbox.get()) is not None:
            try:
                self._conn.send_bytes(frame)
            except (OSError, ValueError):  # the child is gone: what is still queued no longer matters
                return

    def _keep_tail(self, stream: IO[bytes]) -> None:
        try:
            for line in stream:
                text = line.decode("utf-8", "replace").rstrip()
                if text:
                    self.tail.append(text)
        except (OSError, ValueError):
            pass


def spawn(entry: Callable[[Parent, R], None], request: R, *, own_group: bool, grace_s: float = GRACE_S,
          output_lines: int = 0, forkserver: ForkServerContext | None = None, name: str = "remat-child") -> Child:
    """Start a child that runs ``entry(parent, request)`` (``entry`` a module-level function).

    ``own_group``: the child leads a process group of its own (:meth:`Child.kill` kills it whole).
    ``grace_s``: how long an orphaned child's work may take to stop before the child is killed.
    ``output_lines``: how many of its last printed lines to keep (:attr:`Child.tail`; otherwise its
    output is discarded). ``forkserver``: fork the child from this context's forkserver, whose output
    it shares, instead of starting a fresh interpreter.
    """
    launch = Launch(entry, request, own_group, grace_s)
    if forkserver is not None:
        conn, child_conn = forkserver.Pipe(duplex=True)
        process = forkserver.Process(target=_forked, args=(child_conn,), name=name)
        process.start()
        child_conn.close()
        return Child(process, conn, launch)
    mine, theirs = socket.socketpair()
    with theirs:
        popen = subprocess.Popen(
            [sys.executable, "-c", _MAIN, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if output_lines else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if output_lines else subprocess.DEVNULL,
        )
    return Child(popen, Connection(mine.detach()), launch, output_lines)


# -- the child ------------------------------------------------------------------------------------


class Parent:
    """A child's side of its connection: the stop its parent asks for, a thread-safe send, and handlers."""

    def __init__(self, conn: Connection) -> None:
        self.stop = Stop()
        """Set, with the parent's reason, at a :class:`StopRequest` or when the parent is gone."""
        self._conn = conn
        self._sending = threading.Lock()
        self._handling = threading.Lock()
        self._handlers: dict[type, Callable[[Any], None]] = {}
        self._held: list[object] = []
        self._finished = threading.Event()

    def send(self, message: object) -> None:
        """Send ``message`` to the parent (from any thread)."""
        with self._sending:
            self._conn.send(message)

    def on(self, kind: type[M], handler: Callable[[M], None]) -> None:
        """Pass every message of class ``kind`` from the parent to ``handler``, those already come included."""
        with self._handling:
            self._handlers[kind] = handler
            held = [m for m in self._held if isinstance(m, kind)]
            self._held = [m for m in self._held if not isinstance(m, kind)]
            for message in held:
                handler(message)

    def _watch(self, grace_s: float) -> None:
        """Dispatch the parent's messages; once they end (the parent is gone), stop the work and end this
        process and its group ``grace_s`` later, unless the work has finished by then."""
        try:
            while True:
                message = self._conn.recv()
                if isinstance(message, StopRequest):
                    if message.reason is None:
                        self.stop.set()
                    else:
                        self.stop.request(message.reason)
                    continue
                with self._handling:
                    handler = self._handlers.get(type(message))
                    if handler is None:
                        self._held.append(message)
                    else:
                        handler(message)
        except (EOFError, OSError):
            pass
        self.stop.set()
        if not self._finished.wait(grace_s):
            if os.getpgrp() == os.getpid():
                os.killpg(0, signal.SIGKILL)
            os._exit(1)


def _main() -> None:
    """A fresh child: ``sys.argv[1]`` is its connection's file descriptor."""
    try:
        _serve(Connection(int(sys.argv[1])))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # engines' threads must not hold up the exit


def _forked(conn: Connection) -> None:
    """A child forked from the forkserver: the forkserver is its parent, and must not wait for it."""
    _leave_forkserver()
    _die_with(os.getppid())
    _serve(conn)


def _serve(conn: Connection) -> None:
    """Read the launch frame and run its entry with the watchdog; a failure goes back as :class:`ChildFailed`."""
    try:
        launch: Launch[Any] = conn.recv()
    except (EOFError, OSError):
        return
    if launch.own_group:
        os.setpgid(0, 0)
    side = Parent(conn)
    side.send(Started())
    threading.Thread(target=side._watch, args=(launch.grace_s,), name="parent-watch", daemon=True).start()
    try:
        launch.entry(side, launch.request)
    except Exception as e:  # every failure goes back to the parent as a message
        side.send(ChildFailed(type(e).__name__, str(e), traceback.format_exc(limit=20)))
    finally:
        side._finished.set()


def _die_with(parent: int) -> None:
    """Linux: have the kernel SIGKILL this process when ``parent`` exits (elsewhere the watchdog alone ends it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        failed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc with prctl
        return
    if not failed and os.getppid() != parent:  # the parent exited before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _leave_forkserver() -> None:
    """Let the forkserver exit as soon as the process that asked for this child is gone.

    A forkserver stays up while any process holds its "alive" pipe: the process that started it, and
    every child it forked (each inherits the pipe so that it could ask for children of its own that
    way, which no child does). Closing this child's copy leaves that to the process that started it.
    """
    server = _forkserver._forkserver
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
