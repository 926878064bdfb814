"""What an attacker with access to Redis would have a worker run: each leaves a file behind if it ever runs.

The attacks suite puts this directory on the worker's PYTHONPATH, so that RQ could import these by name,
and checks that no file appears (``REMAT_TEST_MARKER_DIR`` names where they would be written).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _mark(name: str) -> None:
    Path(os.environ["REMAT_TEST_MARKER_DIR"], name).touch()


def payload(*args: Any, **kwargs: Any) -> None:
    """A job's function."""
    _mark("payload-ran")


def callback(*args: Any, **kwargs: Any) -> None:
    """A success, failure or stopped callback."""
    _mark("callback-ran")


class Gadget:
    """Unpickling it runs a command, as a crafted pickle would."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_mark, ("unpickled",))
