"""The solver process: ``python -m remat.solvers.backends._child`` (started by ``run_backend``).

Reads one request frame from stdin, runs the backend, writes progress, result or error frames to
the original stdout, and sends engine logs to stderr (engines print to fd 1, which is redirected).
A stop frame on stdin asks the engine to stop; the end of stdin means the parent is gone, so the
child stops the engine and, after a grace period, kills its own process group.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import IO

from .._supervise import GRACE_S
from ._process import child_protocol, read_frame
from ._protocol import Limits
from ._table import get_backend


def main() -> None:
    requests, send = child_protocol()
    _, name, model, limits_doc = read_frame(requests)
    limits = Limits(**limits_doc)
    threading.Thread(target=_watch_parent, args=(requests, limits), daemon=True).start()
    try:
        result = get_backend(name).solve(model, limits, lambda progress: send(("progress", progress)))
        send(("result", result))
    except Exception as e:  # every failure goes back to the parent as a message
        send(("error", type(e).__name__, str(e)))
    finally:
        sys.stderr.flush()
        os._exit(0)


def _watch_parent(requests: IO[bytes], limits: Limits) -> None:
    """Turn a stop frame into ``limits.stop``; at the end of input also kill this process group soon after."""
    try:
        while True:
            read_frame(requests)
            limits.stop.set()
    except (EOFError, OSError):
        limits.stop.set()
    time.sleep(GRACE_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)


if __name__ == "__main__":
    main()
