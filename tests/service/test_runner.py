"""The runner's record of how a solve ended: what the job's caller sees, and what only the server log keeps."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from factories import chain

from remat.service import Claim, SolveSpec, SqliteStore
from remat.service._child import Solved
from remat.service._runner import RunnerConfig, _Supervisor
from remat.solvers import ChildFailed, Stop, StopReason, solve

TRACEBACK = ('Traceback (most recent call last):\n  File "/opt/venv/lib/python3.11/site-packages/remat/solvers/'
             '_solve.py", line 82, in solve\nKeyError: \'secret-internal-name\'\n')


class _CrashingChild:
    """A solver child that reports an unexpected exception, as ``_main`` does."""

    pid = 123456

    def __init__(self) -> None:
        self.sent = False

    def alive(self) -> bool:
        return not self.sent

    def receive(self, timeout_s: float) -> list[ChildFailed]:
        self.sent = True
        return [ChildFailed("KeyError", "'secret-internal-name'", TRACEBACK)]


def test_a_crash_reaches_the_log_but_only_its_exception_name_reaches_the_job(tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture):
    store = SqliteStore(tmp_path / "jobs.sqlite3")
    job, _ = store.submit(SolveSpec("a" * 64, 100, "checkpoint-all"), graph_name="g", token=None)
    running = store.mark_running(job.id, "o")
    config = RunnerConfig(lease_s=3, cancel_grace_s=1, threads=1, max_result_bytes=2**20, ctx=None)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="remat.service"):
        final = _Supervisor(store, Claim(job.id, "o", 1), running, _CrashingChild(), config,
                            threading.Event()).run()
    assert final.status.value == "failed" and "KeyError" in final.error and "server log" in final.error
    assert "Traceback" not in final.error and "secret-internal-name" not in final.error
    assert "secret-internal-name" in caplog.text and job.id in caplog.text


class _SlowChild:
    """A solver child that runs past its time limit and returns its plan once asked to stop."""

    pid = 123457

    def __init__(self) -> None:
        self.stopped_for: list[StopReason] = []

    def alive(self) -> bool:
        return True

    def receive(self, timeout_s: float) -> list[Solved]:
        if not self.stopped_for:
            return []
        stop = Stop()
        stop.request(self.stopped_for[0])
        return [Solved(solve(chain(4), budget_ratio=1.0, strategy="checkpoint-all", stop_event=stop).document())]

    def stop(self, reason: StopReason) -> None:
        self.stopped_for.append(reason)


def test_the_time_limit_backstop_stops_the_solve_with_its_reason(tmp_path: Path):
    store = SqliteStore(tmp_path / "jobs.sqlite3")
    job, _ = store.submit(SolveSpec("b" * 64, 100, "checkpoint-all", time_limit_s=0.01), graph_name="g", token=None)
    running = store.mark_running(job.id, "o")
    config = RunnerConfig(lease_s=3, cancel_grace_s=0.01, threads=1, max_result_bytes=2**20, ctx=None)  # type: ignore[arg-type]
    child = _SlowChild()
    final = _Supervisor(store, Claim(job.id, "o", 1), running, child, config, threading.Event()).run()  # type: ignore[arg-type]
    assert child.stopped_for == [StopReason.DEADLINE]
    assert final.status.value == "succeeded" and final.result_status == "feasible"
