"""Real `remat serve`, `remat worker` and solver helper processes for tests, and small polling helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import redis

from remat.schedules import Graph
from remat.solvers import spawn
from remat.solvers.checkmate._anneal_worker import BestCost, HelperRequest, run_helper

T = TypeVar("T")

REDIS_URL = "redis://127.0.0.1:6379/13"
"""The tests' Redis database. Each test keeps its keys under its own namespace (store prefix, queue
name, worker names) and deletes them afterwards, so test runs side by side do not disturb each other."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """A `remat` command in its own process group, with its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen([sys.executable, "-m", "remat.clients.cli", *args], env={**os.environ, **env},
                                      stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process only (not its group), as a crash or `kill` would; reap it after SIGKILL."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)
            if sig == signal.SIGKILL:
                self.popen.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        self._out.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Server(Process):
    """`remat serve` on a free port; ``url`` once it answers /healthz."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.port = free_port()
        super().__init__(["serve", "--port", str(self.port), *args], env, log)
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"remat serve exited:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"remat serve did not get ready:\n{self.output()}")


class Processes:
    """Starts servers and workers for one test and stops them all afterwards."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.started: list[Process] = []

    def server(self, *args: str, **env: str) -> Server:
        server = Server({**self.env, **env}, self.tmp_path / f"serve-{len(self.started)}.log", *args)
        self.started.append(server)
        return server

    def worker(self, *, queue: str = REDIS_URL, **env: str) -> Process:
        name = f"{self.env.get('REMAT_QUEUE_NAME', 'remat')}-worker{len(self.started)}"
        worker = Process(["worker", "--queue", queue, "--name", name], {**self.env, **env},
                         self.tmp_path / f"worker-{len(self.started)}.log")
        self.started.append(worker)
        return worker

    def stop_all(self) -> None:
        for process in reversed(self.started):
            process.stop()


class RedisServer:
    """A redis-server of one test's own on a free port, which the test may stop and start again (its data is
    saved on stop and loaded on start, as a restarted Redis with persistence would)."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tmp_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.popen = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                       "--appendonly", "no", "--dir", str(self.dir)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self._answers(), timeout_s=10)

    def stop(self) -> None:
        """Save the data and exit (SHUTDOWN SAVE): clients' connections are refused until start()."""
        if self.popen is not None and self.popen.poll() is None:
            try:
                redis.Redis(port=self.port).shutdown(save=True)
            except redis.ConnectionError:  # it closes the connection as it exits
                pass
            self.popen.wait(10)
        self.popen = None

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port).ping())
        except redis.ConnectionError:
            return False


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, found through /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition, timeout_s: float = 30.0, interval_s: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll ``condition()`` until it returns something truthy; that value, or AssertionError on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {condition}")
        time.sleep(interval_s)


def cancel_when_running(client, store, graph, strategy: str, *, ready=None):  # type: ignore[no-untyped-def]
    """Submit a long solve and cancel it once its solver runs (and ``ready(job)`` holds, when given).

    The solve runs to its limit unless proved optimal (no convergence, no MIP gap): CI saw checkmate on
    mobilenet reach the default 1 % gap between the bound and the cancel.

    Returns (the final job, the solver's pid) once the job has ended and its solver process is gone;
    AssertionError otherwise.
    """
    job = client.submit(graph, budget_ratio=0.5, strategy=strategy, time_limit_s=300, mip_gap=0.0,
                        convergence=None)
    pid = wait_until(lambda: store.get(job["id"], with_result=False).solver_pid, timeout_s=30)
    wait_until(lambda: ready is None or ready(client.job(job["id"])), timeout_s=120, interval_s=0.2)
    time.sleep(1.0)
    assert client.job(job["id"])["status"] == "running"
    client.cancel(job["id"])
    final = client.wait(job["id"], timeout_s=20, poll_s=0.1)
    wait_until(lambda: not alive(pid), timeout_s=5)
    return final, pid


def brief(job: dict) -> dict:
    """A job without its result, for assertion messages."""
    return {k: v for k, v in job.items() if k != "result"}


def helper_messages(graph: Graph, budget: int, tasks: tuple[str, ...], time_limit_s: float = 30,
                    explained: float = 0.0, told: float | None = None) -> list[object]:
    """Everything a checkmate helper process sends for one request (MIP bound at once by default), until it
    ends; ``told``: a best cost the parent tells it of right after the request."""
    child = spawn(run_helper, HelperRequest(graph, budget, 1, time_limit_s, tasks, explained), own_group=False)
    if told is not None:
        child.send(BestCost(told))
    messages = []
    try:
        while not child.ended:
            messages.extend(child.receive(1.0))
        assert child.wait(10) and child.exitcode == 0
    finally:
        child.close()
    return messages


def at_once(calls: list[Callable[[], T]]) -> list[T]:
    """Run every call in a thread of its own, all at once; their results, in order."""
    results: list[T | None] = [None] * len(calls)

    def run(k: int) -> None:
        results[k] = calls[k]()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results  # type: ignore[return-value]


def memory_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory now (VmRSS) or at its peak (VmHWM), MB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def invented_methods(port: int, requests: int, *, connections: int = 4) -> None:
    """Send ``requests`` requests with made-up HTTP methods (``M0X17 /v1/jobs``) over kept-alive connections."""
    def flood(k: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s, s.makefile("rb") as answers:
            for i in range(requests // connections):
                s.sendall(f"M{k}X{i} /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                length = 0
                while (line := answers.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answers.read(length)

    at_once([lambda k=k: flood(k) for k in range(connections)])
