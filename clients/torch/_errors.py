"""The PyTorch client's errors, under remat's RematError.

::

    RematError
    ├── CaptureError   the training step cannot be captured as one static joint graph (says why)
    └── PlanRejected   a plan the client received is invalid, over budget or cannot be executed
"""

from __future__ import annotations

from remat.schedules import RematError

__all__ = ["CaptureError", "PlanRejected"]


class CaptureError(RematError):
    """The model's training step cannot be captured: the message says what in the model stops it."""


class PlanRejected(RematError):
    """The client refuses to run a plan: it does not simulate, exceeds the budget, or breaks an execution rule."""
