"""Capture a training step through TorchDynamo, torch.compile's front end, into one graph.

Whatever ``torch.compile(step, fullgraph=True)`` captures, remat captures: library code that
checks whether it is being traced, fused attention, caches and other outputs of any structure,
tensor constants, in-place ops, keyword inputs. Two differences, both as ``torch.export`` has them:
logging calls inside the step are skipped while tracing (transformers warns from inside its models,
which would otherwise break the graph), and shapes are static (each input shape is its own graph).

A step is captured by a *dry run*: the compiled step is called once on the example inputs with the
backend told to stop before anything computes, so capture neither runs the model nor changes its
buffers or the random state, and the real call later finds the graph already compiled.
"""

from __future__ import annotations

import contextlib
import logging
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch._dynamo
from torch import nn

from remat.schedules import RematError

from ._errors import CaptureError

__all__ = ["DryRun", "LossFn", "StepInputs", "backward_start", "compile_step", "error_to_show", "split_inputs",
           "tracing"]

LossFn = Callable[..., torch.Tensor]
"""``loss_fn(model, *args, **kwargs) -> loss``: the training step's loss from the model and one batch."""

StepInputs = tuple[tuple[Any, ...], dict[str, Any]]
"""The positional and keyword arguments of one call of the step."""

_LOG_METHODS = ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log",
                "warning_once", "info_once", "warning_advice")
"""Methods of ``logging.Logger`` skipped while tracing (the last three are the ones transformers adds)."""


class _LoggingFunctions(frozenset[Callable[..., Any]]):
    """The logging functions TorchDynamo skips, written by name where it logs its settings (torch 2.13 leaves this
    setting out of its log; torch 2.11 tries to write it and fails, see :class:`_UnloggableSetting`)."""

    def to_jsonable(self) -> list[str]:
        return sorted(f.__qualname__ for f in self)


class _UnloggableSetting(logging.Filter):
    """Drops torch 2.11's traceback for the compilation metrics it could not write because a setting holds
    :class:`_LoggingFunctions` (it writes every setting as JSON); the compilation itself is unaffected."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, TypeError) and _LoggingFunctions.__name__ in str(error))


logging.getLogger("torch._dynamo.metrics_context").addFilter(_UnloggableSetting())


class DryRun(Exception):
    """Raised by a compiled step on its dry run, once its graph is captured (and planned), before it computes."""


@contextlib.contextmanager
def tracing() -> Iterator[None]:
    """TorchDynamo's settings while a step is traced: logging calls are skipped instead of breaking the graph, and
    a step that DistributedDataParallel runs stays one graph (not split at its buckets), so its plan is the whole
    step's (DDP then all-reduces the gradients after the backward)."""
    ignored = _LoggingFunctions(getattr(logging.Logger, name) for name in _LOG_METHODS if hasattr(logging.Logger, name))
    with torch._dynamo.config.patch(ignore_logging_functions=ignored, optimize_ddp=False):
        yield


def split_inputs(example_inputs: Any) -> StepInputs:
    """``example_inputs`` as the call's arguments: a mapping is keyword arguments, a tensor one argument,
    a tuple or list the positional arguments."""
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


@torch._dynamo.allow_in_graph  # type: ignore[untyped-decorator]
def backward_start(t: torch.Tensor) -> torch.Tensor:
    """Marks, in the traced step, the output the backward starts from (an identity the backend removes)."""
    return t


def compile_step(model: nn.Module, loss_fn: LossFn | None, backend: Callable[..., Any],
                 backward_from: str | int | None = None) -> Callable[..., Any]:
    """The training step, ``model(...)`` or ``loss_fn(model, ...)``, compiled as one static graph by ``backend``.

    With ``backward_from`` (a key of the output, such as ``"loss"``, or a position in an output tuple),
    that output is marked with :func:`backward_start` for the backend; ``"auto"`` marks the key
    ``"loss"`` where the output has one (the backend then decides, :func:`._outputs.drop_outputs`).

    TorchDynamo keeps compiled graphs (and its limit on recompilations) on the code object of the
    function it compiles, so each step gets a code object of its own: steps of other models or
    budgets never share or evict each other's graphs.
    """
    mark = "loss" if backward_from == "auto" else backward_from

    def step(*args: Any, **kwargs: Any) -> Any:
        out = model(*args, **kwargs) if loss_fn is None else loss_fn(model, *args, **kwargs)
        return out if mark is None else _mark(out, mark)

    own = types.FunctionType(step.__code__.replace(), step.__globals__, step.__name__, step.__defaults__,
                             step.__closure__)
    return torch.compile(own, backend=backend, fullgraph=True, dynamic=False)


def _mark(out: Any, key: str | int) -> Any:
    """``out`` with its output at ``key`` marked as where the backward starts (left alone if it has none:
    the backend then says so)."""
    if isinstance(out, Mapping) and isinstance(out.get(key), torch.Tensor):
        out[key] = backward_start(out[key])  # type: ignore[index]
    elif isinstance(out, (tuple, list)) and isinstance(key, int) and -len(out) <= key < len(out) \
            and isinstance(out[key], torch.Tensor):
        items = [backward_start(v) if i == key % len(out) else v for i, v in enumerate(out)]
        out = type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    return out


def error_to_show(e: BaseException, what: str) -> BaseException:
    """The error to show for ``e``, raised while ``what`` was traced or compiled: remat's own errors as they
    are, TorchDynamo's as a CaptureError saying what stopped the capture and where; others unchanged."""
    from torch._dynamo import exc

    inner = getattr(e, "inner_exception", None)
    if isinstance(e, RematError):
        return e
    if isinstance(e, exc.BackendCompilerFailed) and isinstance(inner, RematError):
        return inner
    if isinstance(e, exc.Unsupported):
        return CaptureError(f"{what} cannot be captured as one graph: torch.compile stops {_where(e)}"
                            f"({e.gb_type or 'unsupported'}). {_advice(e)}")
    if isinstance(e, exc.TorchDynamoException):
        return CaptureError(f"{what} cannot be captured: {type(e).__name__}: {_first_line(e)}")
    return e


def _where(e: Any) -> str:
    """``at FILE:LINE, in FUNCTION: `CODE` `` for the innermost frame of user code in the exception, if known."""
    stack = getattr(e, "real_stack", None) or []
    if not stack:
        return ""
    frame = stack[-1]
    code = f" `{frame.line.strip()}`" if frame.line else ""
    return f"at {frame.filename}:{frame.lineno}, in {frame.name}:{code} "


def _advice(e: Any) -> str:
    """What to do about a graph break, in the user's terms."""
    kind = (e.gb_type or "").lower()
    if "data-dependent" in kind or "item()" in kind or "dynamic shape operator" in kind:
        return ("The step decides on a tensor's value, so it has no single static graph: decide from shapes or "
                "outside the training step, or use fixed-size masks instead of indexing by a mask.")
    explanation = next((line.split(":", 1)[1].strip() for line in str(e.msg).splitlines()
                        if line.strip().startswith("Explanation:")), _first_line(e))
    return f"{explanation} remat plans the whole step at once; move that code out of the step."


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
