"""Plan a model in place: ``enable(model, budget=...)`` keeps the model and changes how its training calls run.

>>> model = enable(model, activation_budget=0.5)           # doctest: +SKIP
>>> trainer = Trainer(model=model, args=args, ...)        # doctest: +SKIP

:func:`rematerialize` returns a new module around the model; training frameworks (the Hugging Face
``Trainer``, Lightning) read the model they are given: its class, ``config``, ``loss_type``, the
parameters of its ``forward`` (the Trainer drops the dataset columns the forward does not take,
and passes ``num_items_in_batch`` to a forward that takes ``**kwargs``). :func:`enable` keeps the
same object, with all of that, and replaces only its ``forward`` (an attribute of the instance,
which ``inspect.signature`` reads as the model's own): a call in training mode with gradients on
runs the step through remat's :class:`RematModule`, planned on the first such call from that
call's inputs (and again for each new input shape, and for a step that adds into gradients the
parameters hold); a call in ``eval()`` mode or under ``torch.no_grad()`` runs the model's own forward.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Mapping
from types import MethodType
from typing import Any, TypeVar

import torch
from torch import nn

from remat.schedules import Graph, InvalidRequest
from remat.solvers import ResultDocument

from ._api import RematModule, _backend
from ._cache import PlanCache
from ._outputs import AUTO
from ._transfer import TransferSpec

__all__ = ["disable", "enable", "planned"]

M = TypeVar("M", bound=nn.Module)

_STATE = "_remat_enabled"
"""The key of the model's ``__dict__`` that holds its :class:`_Enabled` state."""

_COUNTS = ("num_items_in_batch",)
"""Keyword arguments that carry a number which changes from step to step (the Hugging Face Trainer's count of
the tokens its loss averages over): given as a Python number they are passed as a 0-d tensor, so that a new
value does not compile the step again (remat's steps are compiled with static values)."""


class _Enabled:
    """What :func:`enable` keeps on a model: its forward before, the options, and the module that plans it."""

    def __init__(self, model: nn.Module, original: Callable[..., Any] | None, options: dict[str, Any]) -> None:
        self.original = original
        """The forward the instance had before (an attribute of its own), or None for its class's."""
        self.options = options
        self.module = self._module(model)
        self.warned = False
        """Whether a training call without a plan was warned of (once)."""

    def _module(self, model: nn.Module) -> RematModule:
        backend = _backend(**self.options, name=type(model).__name__, whole_steps=True)
        own = self.original if self.original is not None else MethodType(type(model).forward, model)

        def forward(_model: nn.Module, *args: Any, **kwargs: Any) -> Any:
            return own(*args, **kwargs)

        return RematModule(model, forward, backend)

    def __deepcopy__(self, memo: dict[int, Any]) -> _Enabled:
        """A copy for the copied model (deepcopy rebinds its forward to it): the same options, nothing planned yet."""
        import copy

        model = copy.deepcopy(self.module.model, memo)  # the copy being made (in memo): bound, not copied again
        return _Enabled(model, copy.deepcopy(self.original, memo), self.options)

    def __reduce__(self) -> Any:
        raise TypeError("A model planned by remat.clients.torch.enable() cannot be pickled whole (its forward is "
                        "replaced): save model.state_dict() instead, or call disable(model) before pickling it "
                        "and enable() again after loading.")


def enable(model: M, budget: int | str | None = None, *, activation_budget: float | None = None,
           strategy: str | None = None, server: str | None = None, cost_model: str = "flops",
           device: str | None = None, compiler: str = "eager", backward_from: str | int | None = AUTO,
           transfer: TransferSpec = None, host_budget: int | str | None = None,
           cache: bool | str | os.PathLike[str] | PlanCache = True, progress: bool = True,
           graph: Graph | None = None, result: Mapping[str, Any] | ResultDocument | None = None,
           **solve_options: Any) -> M:
    """Make ``model``'s training calls follow a plan within the budget, in place; returns ``model`` itself.

    The model stays the same object (its class, attributes, parameters, ``state_dict()`` and the
    signature of ``model.forward``); only its forward runs otherwise. A call in training mode with
    gradients enabled runs through a :class:`RematModule` (see :func:`planned`), which captures and
    plans the step on the first such call, from its inputs (no example batch needed), and again for
    a new input shape or a step that adds into gradients the parameters hold; ``model.eval()`` and
    ``torch.no_grad()`` calls run the model's own forward. For the Hugging Face Trainer:
    ``Trainer(model=enable(model, activation_budget=0.5), ...)``. The options are those of
    :func:`rematerialize` (the captured step is the model's forward, so there is no ``loss_fn``).
    :func:`disable` puts the model's own forward back.
    """
    if not isinstance(model, nn.Module):
        raise InvalidRequest(f"enable() plans a torch.nn.Module in place, got {type(model).__name__}.", field="model")
    if _STATE in model.__dict__:
        raise InvalidRequest(f"remat is already enabled on this {type(model).__name__}: call "
                             f"remat.clients.torch.disable(model) first to plan it with other options.",
                             field="model")
    options = dict(budget=budget, activation_budget=activation_budget, strategy=strategy, server=server,
                   cost_model=cost_model, device=device, compiler=compiler, backward_from=backward_from,
                   transfer=transfer, host_budget=host_budget, cache=cache, progress=progress, graph=graph,
                   result=result, solve_options=solve_options)
    original = model.__dict__.get("forward")
    state = _Enabled(model, original, options)  # checks the options now, not at the first step
    model.__dict__[_STATE] = state
    forward = _planned_forward(original, bound=True) if original is not None else \
        _planned_forward(type(model).forward, bound=False)
    model.forward = MethodType(forward, model)
    return model


def disable(model: M) -> M:
    """Undo :func:`enable`: ``model`` runs its own forward again (its plans are dropped); returns ``model``."""
    state: _Enabled | None = model.__dict__.pop(_STATE, None)
    if state is None:
        raise InvalidRequest(f"remat is not enabled on this {type(model).__name__} (enable() was not called on "
                             f"it), so there is nothing to disable.", field="model")
    del model.__dict__["forward"]
    if state.original is not None:
        model.forward = state.original
    return model


def planned(model: nn.Module) -> RematModule:
    """The :class:`RematModule` that runs ``model``'s training calls since :func:`enable`: its ``plans``,
    ``explain()``... (no plan until the first training call)."""
    state: _Enabled | None = model.__dict__.get(_STATE)
    if state is None:
        raise InvalidRequest(f"remat is not enabled on this {type(model).__name__}: call "
                             f"remat.clients.torch.enable(model, budget=...) first.", field="model")
    return state.module


def _planned_forward(original: Callable[..., Any], *, bound: bool) -> Callable[..., Any]:
    """The forward :func:`enable` binds to the model, with the signature (as ``self, ...``) and name of
    ``original`` (called with the model first unless ``bound``); it finds what it runs on the model it is bound
    to, so a deepcopy of the model gets its own.

    It sets ``__signature__`` rather than ``__wrapped__``: accelerate's ``unwrap_model`` follows
    ``__wrapped__`` down to the function it finds last and binds that, which would drop the plan."""
    signature = inspect.signature(original)
    if bound:
        first = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        signature = signature.replace(parameters=[first, *signature.parameters.values()])

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        state: _Enabled = self.__dict__[_STATE]
        if not (self.training and torch.is_grad_enabled()):
            own = state.original if state.original is not None else MethodType(type(self).forward, self)
            return own(*args, **kwargs)
        for key in _COUNTS:
            if isinstance(kwargs.get(key), (int, float)) and not isinstance(kwargs[key], bool):
                kwargs[key] = torch.tensor(kwargs[key])
        module = state.module
        out = module(*args, **kwargs)
        if not module.plans and not state.warned:
            state.warned = True
            _warn_unplanned(self)
        return out

    forward.__signature__ = signature  # type: ignore[attr-defined]
    forward.__name__ = getattr(original, "__name__", "forward")
    forward.__qualname__ = getattr(original, "__qualname__", "forward")
    forward.__doc__ = getattr(original, "__doc__", None)
    return forward


def _warn_unplanned(model: nn.Module) -> None:
    warnings.warn(f"{type(model).__name__}: this training call had no backward pass to plan (no parameter requires "
                  f"a gradient), so remat planned nothing for it.", stacklevel=3)
