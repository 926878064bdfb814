"""The drop-in API: a model whose training step follows a plan, or a torch.compile backend that plans.

>>> m = rematerialize(model, batch, activation_budget=0.5)    # doctest: +SKIP
>>> loss = m(**batch).loss; loss.backward(); optimizer.step()  # doctest: +SKIP
>>> compiled = torch.compile(model, backend=backend(budget="6GiB"))  # doctest: +SKIP
>>> m = rematerialize(model, batch, budget="6GiB", transfer="pcie5-x16")  # may offload  # doctest: +SKIP

The captured step is the model's call (any outputs: a loss, a ModelOutput, logits whose loss is
computed outside) or ``loss_fn(model, ...)``. The returned module shares the model's parameters and
buffers (an optimizer built on either works for both), by the model's own names: ``named_parameters()``,
``named_buffers()`` and ``state_dict()`` are the model's, and an attribute it lacks is the model's (as on
torch.compile's module).
"""

from __future__ import annotations

import copy
import functools
import os
import pickle
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from remat.schedules import Graph, InvalidRequest, InvalidResult, Plan, Simulation, parse_size
from remat.solvers import ResultDocument

from ._backend import PlannedGraph, RematBackend
from ._cache import PlanCache
from ._capture import DryRun, LossFn, compile_step, error_to_show, split_inputs, tracing
from ._data_parallel import data_parallel_bucket_bytes
from ._errors import CaptureError
from ._explain import Explanation, backward_starts, explain
from ._joint import JointGraph
from ._modes import modes_set_aside
from ._outputs import AUTO, NO_GRADIENT
from ._pipeline_stage import StageRole, running_stage
from ._planning import Budget, Planner, default_strategy
from ._transfer import TransferSpec

__all__ = ["RematModule", "backend", "capture", "export_graph", "rematerialize"]


class RematModule(nn.Module):
    """A model whose training step runs a rematerialization plan.

    Calling it calls the model (or ``loss_fn(model, ...)``) through the compiled step: the forward
    runs the plan's forward and ``backward()`` on anything computed from its outputs runs the plan's
    backward. A new input shape, ``eval()`` or ``torch.no_grad()`` compiles the step again, as
    torch.compile does; each new training graph gets a plan of its own (``plans``). Under a dispatch mode
    (FlopCounterMode...) the planned graphs run under the mode (:mod:`._modes`). A deep copy or a pickled module
    compiles its own step for its model on its first call, following the plans it carries.

    Attributes
    ----------
    plans : tuple of PlannedGraph
        Every graph planned so far, the example inputs' first; ``graph``, ``result``, ``plan``,
        ``simulation`` and ``fixed`` are those of the latest.
    """

    def __init__(self, model: nn.Module, loss_fn: LossFn | None, backend: RematBackend) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.backend = backend
        self._steps: dict[tuple[bool, int, StageRole | None], Callable[..., Any]] = {}
        """The compiled step by whether it adds into gradients the parameters hold, by the bytes of the gradient
        buckets of the DistributedDataParallel that runs it (0 without one) and by the role of the pipeline stage
        that runs it (None without one)."""
        self._register_load_state_dict_pre_hook(_under_model)  # type: ignore[no-untyped-call]

    def __getstate__(self) -> dict[str, Any]:
        """What ``copy.deepcopy`` and pickle keep: all but the compiled steps, which call this module's model; a copy
        compiles its own on its first call, following the plans it carries (:meth:`RematBackend.__setstate__`)."""
        state: dict[str, Any] = super().__getstate__()  # type: ignore[no-untyped-call]
        state["_steps"] = {}
        if self.loss_fn is not None:
            state["loss_fn"] = _SavedLossFn(self.loss_fn)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        saved = state.get("loss_fn")
        super().__setstate__({**state, "loss_fn": saved.fn if isinstance(saved, _SavedLossFn) else saved})  # type: ignore[no-untyped-call]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with tracing(), modes_set_aside():
            try:
                return self._step()(*args, **kwargs)
            except Exception as e:
                _reraise(e, self.backend.name)

    def _step(self) -> Callable[..., Any]:
        """The compiled step for the parameters as they are: a step that adds into gradients they already hold
        (gradient accumulation) holds those too, one that a DistributedDataParallel runs holds its buckets, and one
        that a pipeline stage runs its receive buffers, so each has a plan of its own."""
        key = (any(p.grad is not None for p in self.model.parameters()), data_parallel_bucket_bytes(), running_stage())
        if key not in self._steps:
            self._steps[key] = compile_step(self.model, self.loss_fn, self.backend, self.backend.backward_from)
        return self._steps[key]

    def _plan_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Capture and plan the step for these inputs without running it (a dry run)."""
        _dry_run(self, self.backend, args, kwargs)
        if not self.backend.planned:
            raise CaptureError("The step has no backward pass to plan: capture it with gradients enabled and with "
                               "parameters that require them.")

    @property
    def plans(self) -> tuple[PlannedGraph, ...]:
        return tuple(self.backend.planned)

    @property
    def graph(self) -> Graph:
        """The remat.graph/v1 of the latest planned graph (``graph.to_json()`` is the document)."""
        return self.backend.planned[-1].graph

    @property
    def result(self) -> ResultDocument:
        """The remat.result/v1 the latest planned graph follows (``result.to_json()`` is the document)."""
        return self.backend.planned[-1].result

    @property
    def plan(self) -> Plan:
        return self.backend.planned[-1].plan

    @property
    def simulation(self) -> Simulation:
        """The plan's simulation: its cost and peak in the graph's units and bytes."""
        return self.backend.planned[-1].simulation

    @property
    def fixed(self) -> Mapping[str, int]:
        """The latest graph's fixed memory by category (parameters, buffers, inputs, constants, gradients,
        outputs, tangents, and bounds on saved random states and input copies)."""
        return self.backend.planned[-1].joint.fixed

    def explain(self, *args: Any, **kwargs: Any) -> Explanation:
        """The latest plan as a person reads it (``print(m.explain())``): what is live at its peak and what it
        recomputes or offloads, by module and source line.

        Given a batch (the step's arguments), one step on it is also measured (on the CPU, to the byte)
        and set beside the plan made for it, saying which values were live where the measured peak is
        over the plan's; the backward starts from the loss, else from every output. The model is left as
        it was: gradients, buffers and the random state are put back. ``plot()`` of the result draws memory
        over the step, planned against measured, as SVG.
        """
        def latest() -> PlannedGraph:
            return self.backend.planned[-1]

        def step() -> None:
            starts, gradients = backward_starts(self(*args, **kwargs), NO_GRADIENT)  # the other outputs go here
            torch.autograd.backward(starts, gradients)

        return explain(latest, step=step if args or kwargs else None, model=self.model)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The model's own state dict (its keys, no prefix): it loads into the model as it is."""
        return self.model.state_dict(*args, **kwargs)

    def named_modules(self, memo: set[nn.Module] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, nn.Module]]:
        """This module, then the model's modules under the same prefix (not ``model.``): so that its parameters and
        buffers, and those a module holding it lists, go by the names of ``state_dict()``."""
        memo = set() if memo is None else memo
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        yield from self.model.named_modules(memo, prefix, remove_duplicate)

    def __getattr__(self, name: str) -> Any:
        """The model's attribute where the module has none, as on torch.compile's module: the model's names resolve
        here (``m.get_parameter(name)`` for a name of ``m.named_parameters()``), and so does ``m.config``."""
        try:
            return super().__getattr__(name)
        except AttributeError as missing:
            model = self.__dict__.get("_modules", {}).get("model")
            if model is None or name.startswith("__"):
                raise
            try:
                return getattr(model, name)
            except AttributeError:
                raise missing from None

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Load a state dict of the model (as ``model.load_state_dict``)."""
        return self.model.load_state_dict(state_dict, strict=strict, assign=assign)


def _under_model(state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    """Where a module holding a RematModule loads its state: the model's keys, as :meth:`RematModule.state_dict`
    gives them (``prefix`` and the model's own names), moved under the ``model`` they load into."""
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(f"{prefix}model.")]:
        state_dict[f"{prefix}model.{key[len(prefix):]}"] = state_dict.pop(key)


class _SavedLossFn:
    """A RematModule's ``loss_fn`` in its state: copied as it is, pickled by name, or refused saying what to do."""

    def __init__(self, fn: LossFn) -> None:
        self.fn = fn

    def __deepcopy__(self, memo: dict[int, Any]) -> _SavedLossFn:
        return _SavedLossFn(copy.deepcopy(self.fn, memo))

    def __reduce__(self) -> tuple[type[_SavedLossFn], tuple[LossFn]]:
        fn = self.fn.func if isinstance(self.fn, functools.partial) else self.fn
        if isinstance(fn, types.FunctionType) and not _importable(fn):
            what = "a lambda" if fn.__name__ == "<lambda>" else f"{fn.__qualname__}, a function defined inside another,"
            raise pickle.PicklingError(f"A RematModule whose loss_fn is {what} cannot be pickled (pickle saves a "
                                       f"function by its name): define loss_fn at the top level of a module, or save "
                                       f"m.state_dict() and call rematerialize() again on the loaded model.")
        return _SavedLossFn, (self.fn,)


def _importable(fn: types.FunctionType) -> bool:
    """Whether ``fn`` is found by its module and qualified name, as pickle looks functions up."""
    found: Any = sys.modules.get(fn.__module__)
    for name in fn.__qualname__.split("."):
        found = getattr(found, name, None)
    return found is fn


def rematerialize(model: nn.Module, example_inputs: Any, budget: int | str | None = None, *,
                  activation_budget: float | None = None, strategy: str | None = None, server: str | None = None,
                  loss_fn: LossFn | None = None, cost_model: str = "flops", device: str | None = None,
                  compiler: str = "eager", backward_from: str | int | None = AUTO,
                  transfer: TransferSpec = None, host_budget: int | str | None = None,
                  cache: bool | str | os.PathLike[str] | PlanCache = True, progress: bool = True,
                  graph: Graph | None = None, result: Mapping[str, Any] | ResultDocument | None = None,
                  in_flight: int = 1, **solve_options: Any) -> RematModule:
    """Capture ``model``'s training step, plan it within the budget, and return a module that runs the plan.

    Parameters
    ----------
    model : nn.Module
        The model as it comes: it may return a loss, a ModelOutput, a dict or tensors.
    example_inputs : tuple, dict or Tensor
        One batch, as the model takes it: positional arguments (a tuple), keyword arguments (a dict,
        such as a tokenizer's output) or one tensor. The step is captured and planned for these
        shapes without running; other shapes are planned when they come.
    budget : int or str
        Bytes the step may hold in total (``"6GiB"``...): parameters, buffers, inputs, gradients and
        activations (not optimizer state, which lives outside the step).
    activation_budget : float
        Or a fraction of the step's activation memory (its peak without rematerialization less
        parameters, buffers, inputs and gradients): 0.5 keeps the activations to half.
    strategy : str, optional
        A strategy of ``remat strategies``: ``checkmate`` by default, and with a ``transfer`` the first
        installed of ``checkmate-offload`` and ``offload-window``.
    server : str, optional
        URL of a remat service to solve on; in-process by default.
    loss_fn : callable, optional
        ``loss_fn(model, *args, **kwargs) -> loss`` to capture the loss with the model.
    cost_model : {"flops", "measured"}
        Roofline estimate against a device profile, or per-node timing on the real device.
    device : str, optional
        Device profile of the roofline (``"cpu"``, ``"a100"``, ``"h100"``...); default from the tensors.
    compiler : {"eager", "inductor"}
        Run the planned graphs op for op, or compile them with Inductor.
    backward_from : str, int or None
        The output the backward starts from. By default (``"auto"``) the step's loss when it returns
        one beside other outputs (``model(**batch)`` of a transformers model given labels, whose
        loop runs ``model(**batch).loss.backward()``): the other outputs (logits, caches) come back
        without gradient, so the backward neither allocates nor holds theirs, and are counted until
        the end of the forward, where such a loop drops them (a warning says so if one is still held
        when the backward starts; backpropagating through one raises). A key or position names that
        output instead; None lets every output carry a gradient and counts each until the end of
        the step.
    transfer : str, Transfer or dict, optional
        Let the plan copy values to host memory and back over this device-host link: a name of
        ``remat.schedules.TRANSFER_PROFILES`` (``"pcie5-x16"``...), ``"auto"`` for the link of the
        CUDA device the model is on, or a ``Transfer`` in the graph's units. Copies run on streams of
        their own beside the compute (on the CPU, where there are none, they run in place).
    host_budget : int or str, optional
        Bytes the plan's host copies may hold (``"64GiB"``...); unbounded by default.
    cache : bool, path or PlanCache
        Keep plans on disk (default ``~/.cache/remat/plans``), so that a script run again does not
        solve again; False to always solve.
    progress : bool
        Show a progress line on stderr for solves that take more than a second.
    graph : Graph, optional
        The graph exported from this step earlier (``remat profile``, :func:`export_graph`): its
        costs are reused; the step must still export the same graph.
    result : dict or ResultDocument, optional
        A remat.result/v1 to follow instead of solving: the JSON ``remat solve --output`` wrote for
        this step's graph, or a :class:`~remat.solvers.ResultDocument` (another module's ``result``);
        checked like any other, against its own budget unless one is given.
    in_flight : int
        Micro-batches the module holds at once, their forwards run and their backwards not yet: a stage of a
        1F1B pipeline of S stages holds S - i (stage i, from 0). The budget then holds the saved values of the
        others beside the micro-batch that runs. Default 1.
    **solve_options
        Passed to the solver: ``time_limit_s`` (a cap: local solves stop once their best plan stops
        improving, see :class:`remat.solvers.Convergence`), ``backend``, ``mip_gap``...

    Raises
    ------
    InvalidRequest
        An argument is malformed: a budget, a strategy, or a ``result`` that is not a remat.result/v1.
    CaptureError
        The step cannot be captured as one graph; the message says what stops it and where.
    PlanRejected
        No plan fits (the message quotes the leanest plan found), or the plan received
        does not simulate within the budget.
    """
    remat_backend = _backend(budget, activation_budget, strategy=strategy, server=server, cost_model=cost_model,
                             device=device, compiler=compiler, backward_from=backward_from, transfer=transfer,
                             host_budget=host_budget, cache=cache, progress=progress, graph=graph, result=result,
                             solve_options=solve_options, name=type(model).__name__, whole_steps=True,
                             in_flight=in_flight)
    module = RematModule(model, loss_fn, remat_backend)
    module._plan_for(*split_inputs(example_inputs))
    return module


def backend(budget: int | str | None = None, *, activation_budget: float | None = None, strategy: str | None = None,
            server: str | None = None, cost_model: str = "flops", device: str | None = None,
            compiler: str = "eager", backward_from: str | int | None = AUTO, transfer: TransferSpec = None,
            host_budget: int | str | None = None, cache: bool | str | os.PathLike[str] | PlanCache = True,
            progress: bool = True, graph: Graph | None = None, result: Mapping[str, Any] | ResultDocument | None = None,
            in_flight: int = 1, **solve_options: Any) -> RematBackend:
    """A torch.compile backend that plans every training graph within the budget.

    ``torch.compile(model, backend=backend(activation_budget=0.5), fullgraph=True, dynamic=False)``;
    the arguments are those of :func:`rematerialize` (``backward_from="auto"`` finds the loss as the
    one scalar output with a gradient). Its ``planned`` list holds each graph's plan. Compile with
    ``dynamic=False`` (remat plans static shapes); without ``fullgraph=True`` the graphs of a step
    share a byte budget in the order they first run (:mod:`remat.clients.torch._backend`).
    """
    return _backend(budget, activation_budget, strategy=strategy, server=server, cost_model=cost_model,
                    device=device, compiler=compiler, backward_from=backward_from, transfer=transfer,
                    host_budget=host_budget, cache=cache, progress=progress, graph=graph, result=result,
                    solve_options=solve_options, in_flight=in_flight)


def capture(model: nn.Module, example_inputs: Any, *, loss_fn: LossFn | None = None, cost_model: str = "flops",
            device: str | None = None, backward_from: str | int | None = AUTO) -> tuple[JointGraph, Graph]:
    """The joint graph of ``model``'s training step and its remat.graph/v1, captured without running the step
    (``backward_from`` as for :func:`rematerialize`)."""
    exporter = RematBackend(None, None, name=type(model).__name__, cost_model=cost_model, device=device,
                            backward_from=backward_from)
    args, kwargs = split_inputs(example_inputs)
    step = compile_step(model, loss_fn, exporter, exporter.backward_from)
    with tracing():
        _dry_run(step, exporter, args, kwargs)
    if not exporter.captured:
        raise CaptureError("The step has no backward pass to capture: capture it with gradients enabled and with "
                           "parameters that require them.")
    return exporter.captured[-1]


def export_graph(model: nn.Module, example_inputs: Any, *, loss_fn: LossFn | None = None, cost_model: str = "flops",
                 device: str | None = None, backward_from: str | int | None = AUTO) -> Graph:
    """The remat.graph/v1 of ``model``'s training step (what ``remat profile`` writes)."""
    return capture(model, example_inputs, loss_fn=loss_fn, cost_model=cost_model, device=device,
                   backward_from=backward_from)[1]


# -- helpers ------------------------------------------------------------------------------------


def _dry_run(step: Any, remat_backend: RematBackend, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Call the compiled ``step`` so that it captures (and plans) its graph, stopping before it computes."""
    remat_backend.dry_run = True
    try:
        with modes_set_aside():
            step(*args, **kwargs)
    except Exception as e:
        if not isinstance(e, DryRun) and not isinstance(getattr(e, "inner_exception", None), DryRun):
            _reraise(e, remat_backend.name)
    else:
        raise CaptureError(f"torch.compile ran {remat_backend.name} without compiling it (it may have reached "
                           f"its recompile limit); remat cannot plan it.")
    finally:
        remat_backend.dry_run = False


def _reraise(e: Exception, what: str) -> None:
    """Raise what the user should see for ``e``: remat's error from inside torch.compile's wrapping,
    a CaptureError for what stopped TorchDynamo (its own error as the cause), or ``e`` itself."""
    shown = error_to_show(e, what)
    if shown is e:
        raise e
    raise shown from (None if shown is getattr(e, "inner_exception", None) else e)


def _backend(budget: int | str | None, activation_budget: float | None, *, strategy: str | None, server: str | None,
             cost_model: str, device: str | None, compiler: str, backward_from: str | int | None,
             transfer: TransferSpec, host_budget: int | str | None,
             cache: bool | str | os.PathLike[str] | PlanCache, progress: bool, graph: Graph | None,
             result: Mapping[str, Any] | ResultDocument | None, solve_options: Mapping[str, Any],
             name: str = "step", whole_steps: bool = False, in_flight: int = 1) -> RematBackend:
    """The backend of :func:`rematerialize` and :func:`backend` from their arguments (a ``result`` followed
    is checked against its own budget unless one is given)."""
    given = None if result is None else _given(result)
    if given is not None and budget is None and activation_budget is None:
        budget = given.budget
    planner = _planner(strategy, transfer, host_budget, server=server, options=solve_options, cache=cache,
                       progress=progress, given=given)
    return RematBackend(Budget.of(budget, activation_budget, in_flight), planner, name=name, cost_model=cost_model,
                        device=device, compiler=compiler, costs_from=graph, backward_from=backward_from,
                        transfer=transfer, whole_steps=whole_steps)


def _planner(strategy: str | None, transfer: TransferSpec, host_budget: int | str | None, *, server: str | None,
             options: Mapping[str, Any], cache: bool | str | os.PathLike[str] | PlanCache, progress: bool,
             given: ResultDocument | None = None) -> Planner:
    """The planner of :func:`rematerialize` and :func:`backend`; the default strategy depends on the transfer (a
    result ``given`` is followed whatever the strategy)."""
    if strategy is None:
        strategy = "checkmate" if given is not None else default_strategy(offload=transfer is not None)
    return Planner(strategy=strategy, server=server,
                   options=options, cache=_cache(cache), progress=progress, given=given,
                   host_budget=None if host_budget is None else parse_size(host_budget))


def _given(result: Mapping[str, Any] | ResultDocument) -> ResultDocument:
    """The ``result=`` to follow as a ResultDocument: given as one, or parsed from its JSON once, here."""
    if isinstance(result, ResultDocument):
        return result
    try:
        return ResultDocument.from_json(result)
    except InvalidResult as e:
        raise InvalidRequest(f"result= must be a remat.result/v1 (what remat solve --output writes): {e}",
                             field="result") from e


def _cache(cache: bool | str | os.PathLike[str] | PlanCache) -> PlanCache | None:
    if isinstance(cache, PlanCache):
        return cache
    if cache is True:
        return PlanCache()
    if cache is False or cache is None:
        return None
    if isinstance(cache, (str, os.PathLike)):
        return PlanCache(cache)
    raise InvalidRequest(f"cache must be True, False, a directory or a PlanCache, got {type(cache).__name__}.",
                         field="cache")
