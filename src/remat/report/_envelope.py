"""Long memory lines made short for a browser, without losing their peaks."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_STEPS", "memory_envelope"]

MAX_STEPS = 1500
"""Most points of a memory line sent to the browser."""


def memory_envelope(timeline: np.ndarray, max_points: int = MAX_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """(steps, memory): the timeline itself, or, when longer than ``max_points``, the highest memory of
    each span of steps and the step where it happened.

    >>> steps, memory = memory_envelope(np.array([1, 5, 2, 2, 7, 1, 3]), 3)
    >>> steps.tolist(), memory.tolist()
    ([1, 4, 6], [5, 7, 3])
    """
    n = len(timeline)
    span = max(1, math.ceil(n / max_points))
    if span == 1:
        return np.arange(n), np.asarray(timeline)
    buckets = math.ceil(n / span)
    padded = np.full(buckets * span, np.iinfo(np.int64).min, dtype=np.int64)
    padded[:n] = timeline
    where = padded.reshape(buckets, span).argmax(axis=1) + span * np.arange(buckets)
    return where, np.asarray(timeline)[where]
