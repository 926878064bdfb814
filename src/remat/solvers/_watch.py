"""A watcher thread: call an action once a condition holds, for as long as a block runs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["watching"]


@contextmanager
def watching(condition: Callable[[], bool], action: Callable[[], None], *, every_s: float,
             name: str) -> Iterator[None]:
    """While the block runs, look at ``condition`` every ``every_s`` seconds and call ``action`` once it holds."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(every_s):
            if condition():
                action()
                return

    watcher = threading.Thread(target=watch, name=name, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
