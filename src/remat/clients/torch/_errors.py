"""The PyTorch client's errors, under remat's RematError.

::

    RematError
    ├── CaptureError   the training step cannot be captured as one static joint graph (says why)
    └── PlanRejected   a plan the client received is invalid, over budget or cannot be executed

Raised inside torch.compile (remat's backend), an error reaches the caller as itself through
:func:`through_torch_compile`, not wrapped in a compiler's ``BackendCompilerFailed``.
"""

from __future__ import annotations

import types
from typing import Any

from remat.schedules import RematError

__all__ = ["CaptureError", "PlanRejected", "through_torch_compile"]


class CaptureError(RematError):
    """The model's training step cannot be captured: the message says what in the model stops it."""


class PlanRejected(RematError):
    """The client refuses to run a plan: it does not simulate, exceeds the budget, or breaks an execution rule."""


def _passing_through(cls: type[RematError]) -> type[RematError]:
    """``cls`` as an error torch.compile lets through as it is (those it shortens the traceback of), whose
    message stays remat's own (torch.compile appends advice on its own tracebacks to the arguments)."""
    from torch._dynamo.exc import ShortenTraceback

    if cls not in _PASSING:
        def message(self: Any) -> str:
            return str(self.message)

        _PASSING[cls] = type(cls.__name__, (cls, ShortenTraceback),
                             {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__str__": message})
    return _PASSING[cls]


_PASSING: dict[type[RematError], type[RematError]] = {}


def through_torch_compile(e: RematError, frame: types.FrameType | None) -> RematError:
    """``e``, raised in the backend, as an error torch.compile hands to the caller unwrapped (still ``e``'s type;
    its traceback starts at ``frame``)."""
    message = str(e)
    e.__class__ = _passing_through(type(e))
    e.message = message  # type: ignore[attr-defined]
    e.first_useful_frame = frame  # type: ignore[attr-defined]
    return e
