"""The module rematerialize() returns is a module: a deep copy trains its own model with the plan, a pickled
or saved one loads and trains with it, a step runs under FlopCounterMode and other dispatch modes (the
planned graphs under the mode), and its parameters and buffers go by the model's own names."""

from __future__ import annotations

import collections
import copy
import io
import pickle

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from torch_models import MODELS  # noqa: E402

from remat.clients.torch import rematerialize  # noqa: E402
from remat.clients.torch._planning import Planner  # noqa: E402

pytestmark = pytest.mark.torch

PLANNED = {"activation_budget": 0.7, "strategy": "linearized-greedy", "cache": False, "progress": False}
"""A plan that recomputes, for the models here (dropout included); for the GPT, at its batch and at half of it."""


def _model(name: str = "gpt"):
    torch.manual_seed(0)
    return MODELS[name]()


def _sequential():
    """A model of torch's own modules (dropout included) and its loss, for pickling: pickle finds classes and
    functions by name, and torch_models is loaded again under its name by another test (remat profile FILE.py)."""
    torch.manual_seed(0)
    blocks = [layer for _ in range(4) for layer in (nn.Linear(64, 64), nn.GELU(), nn.Dropout(0.1))]
    model = nn.Sequential(nn.Linear(32, 64), *blocks, nn.LayerNorm(64), nn.Linear(64, 8))
    return model, (torch.randn(64, 32), torch.randint(0, 8, (64,))), _cross_entropy


def _cross_entropy(model, x, y):
    return F.cross_entropy(model(x), y)


def _gradients(rm, inputs) -> list[torch.Tensor]:
    """The gradients one step of ``rm`` leaves in its model's parameters, from none (dropout seeded alike)."""
    rm.model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    rm(*inputs).backward()
    return [p.grad for p in rm.model.parameters()]


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture
def solves(monkeypatch) -> list[int]:
    """How many times a planner solved (one entry a solve)."""
    calls: list[int] = []
    solve = Planner._solve

    def counted(self, *args, **kwargs):
        calls.append(1)
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(Planner, "_solve", counted)
    return calls


# -- copies -------------------------------------------------------------------------------------------


def test_a_deep_copy_trains_its_own_model_with_the_plan(solves):
    model, inputs, loss_fn = _model()
    unplanned = copy.deepcopy(model)
    rm = rematerialize(model, inputs, loss_fn=loss_fn, **PLANNED)
    twin = copy.deepcopy(rm)
    assert twin.model is not model and {id(p) for p in twin.parameters()}.isdisjoint(map(id, model.parameters()))

    copied = _gradients(twin, inputs)
    assert all(p.grad is None for p in model.parameters())  # the copy's step leaves the original alone
    assert all(g is not None for g in copied)
    assert len(twin.plans) == 1 and twin.plans[0].result == rm.plans[0].result and len(solves) == 1
    assert twin.plans[0].joint is not rm.plans[0].joint  # the copy's own capture, following the plan it had

    assert _equal(_gradients(rm, inputs), copied)  # the original trains its own model as before
    fresh = rematerialize(unplanned, inputs, loss_fn=loss_fn, **PLANNED)
    assert _equal(_gradients(fresh, inputs), copied)


# -- pickles ------------------------------------------------------------------------------------------


def test_a_pickled_or_saved_module_loads_and_trains_with_the_same_plan(solves):
    model, inputs, loss_fn = _sequential()
    rm = rematerialize(model, inputs, loss_fn=loss_fn, **PLANNED)
    assert rm.simulation.recomputations > 0
    expected = _gradients(rm, inputs)
    model.zero_grad(set_to_none=True)

    saved = io.BytesIO()
    torch.save(rm, saved)
    saved.seek(0)
    for loaded in (pickle.loads(pickle.dumps(rm)), torch.load(saved, weights_only=False)):
        assert loaded.model is not model and loaded.plans[0].result == rm.plans[0].result
        assert _equal(_gradients(loaded, inputs), expected)
        assert all(p.grad is None for p in model.parameters())
        assert len(loaded.plans) == 1 and loaded.plans[0].joint.name == rm.plans[0].joint.name
    assert len(solves) == 1  # the plan travels with the module: nothing is solved again


def test_a_module_whose_loss_is_a_lambda_says_how_to_pickle_it():
    model, inputs, _ = _sequential()
    rm = rematerialize(model, inputs, loss_fn=lambda m, x, y: _cross_entropy(m, x, y), **PLANNED)
    with pytest.raises(pickle.PicklingError, match=r"loss_fn .*top level of a module.*state_dict\(\)"):
        pickle.dumps(rm)
    assert _equal(_gradients(copy.deepcopy(rm), inputs), _gradients(rm, inputs))  # a copy keeps it as it is


# -- dispatch modes -----------------------------------------------------------------------------------


class _Ops(TorchDispatchMode):
    """A dispatch mode of one's own: counts the ops it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def test_a_step_under_flop_counter_mode_runs_the_plan_and_counts_its_flops():
    model, inputs, loss_fn = _model()
    unplanned = copy.deepcopy(model)
    rm = rematerialize(model, inputs, loss_fn=loss_fn, **PLANNED)
    assert rm.simulation.recomputations > 0
    expected = _gradients(rm, inputs)
    with FlopCounterMode(display=False) as planned:
        counted = _gradients(rm, inputs)
    assert _equal(counted, expected)
    with FlopCounterMode(display=False) as eager:
        loss_fn(unplanned, *inputs).backward()
    assert planned.get_total_flops() > eager.get_total_flops() > 0  # what the plan computes again is counted

    whole = rematerialize(unplanned, inputs, loss_fn=loss_fn, **{**PLANNED, "activation_budget": 1.0,
                                                                  "strategy": "checkpoint-all"})
    with FlopCounterMode(display=False) as once:
        _gradients(whole, inputs)
    assert once.get_total_flops() == eager.get_total_flops()  # a plan that computes each op once: eager's count


def test_a_step_under_a_dispatch_mode_of_ones_own_runs_the_plan_under_it():
    model, inputs, loss_fn = _model()
    rm = rematerialize(model, inputs, loss_fn=loss_fn, **PLANNED)
    expected = _gradients(rm, inputs)
    half = tuple(t[:2] for t in inputs)
    with _Ops() as mode:
        under = _gradients(rm, inputs)
        seen = mode.ops.copy()
        first = _gradients(rm, half)  # a new shape, captured and planned under the mode
        captured = mode.ops - seen
        again = _gradients(rm, half)
        second = mode.ops - seen - captured
    assert _equal(under, expected) and _equal(again, first) and len(rm.plans) == 2
    assert seen["aten.mm.default"] > 0 and seen["aten.native_layer_norm_backward.default"] > 0

    # the mode sees the steps' ops, not those of capturing and planning one (a graph's first run detaches more)
    def computing(ops):
        return {op: n for op, n in ops.items() if op != "aten.detach.default"}

    assert computing(captured) == computing(second) and torch._C._len_torch_dispatch_stack() == 0


# -- names --------------------------------------------------------------------------------------------


def test_parameters_and_buffers_go_by_the_models_own_names_as_in_its_state_dict():
    model, inputs, loss_fn = _model("resnet")
    rm = rematerialize(model, inputs, loss_fn=loss_fn, **{**PLANNED, "activation_budget": 1.0,
                                                         "strategy": "checkpoint-all"})
    for mine, theirs in ((rm.named_parameters(), model.named_parameters()),
                         (rm.named_buffers(), model.named_buffers())):
        assert [(n, id(t)) for n, t in mine] == [(n, id(t)) for n, t in theirs]
    state = rm.state_dict()
    assert all(name in state for name, _ in [*rm.named_parameters(), *rm.named_buffers()])
    assert all(rm.get_parameter(name) is p for name, p in rm.named_parameters())
    assert [n for n, _ in rm.named_parameters(prefix="net")][0] == "net." + next(model.named_parameters())[0]

    # an optimizer keyed by name (no decay on biases and norms) and a checkpoint of the model load alike
    decay = [n for n, p in rm.named_parameters() if p.ndim > 1]
    optimizer = torch.optim.AdamW([{"params": [rm.get_parameter(n) for n in decay]},
                                   {"params": [p for n, p in rm.named_parameters() if n not in decay],
                                    "weight_decay": 0.0}])
    rm(*inputs).backward()
    optimizer.step()
    fresh = _model("resnet")[0].state_dict()
    rm.load_state_dict(fresh)
    assert all(torch.equal(rm.get_parameter(name), fresh[name]) for name, _ in rm.named_parameters())


def test_a_module_holding_it_saves_and_loads_its_state_by_the_models_names():
    model, inputs, loss_fn = _model("resnet")
    rm = rematerialize(model, inputs, loss_fn=loss_fn, **{**PLANNED, "activation_budget": 1.0,
                                                         "strategy": "checkpoint-all"})
    holder = nn.ModuleDict({"net": rm})  # a training wrapper that holds the planned module, as EMA or a task head do
    state = holder.state_dict()
    assert sorted(state) == sorted(f"net.{name}" for name in model.state_dict())
    fresh = {f"net.{name}": value + 1 if value.is_floating_point() else value  # other values than the model's
             for name, value in _model("resnet")[0].state_dict().items()}
    holder.load_state_dict(fresh)  # strict: every key of its own state dict, and no other
    assert all(torch.equal(model.state_dict()[name], fresh[f"net.{name}"]) for name in model.state_dict())
    named = [*holder.named_parameters(), *holder.named_buffers()]
    assert [(n, id(t)) for n, t in named] == [(f"net.{n}", id(t)) for n, t in [*model.named_parameters(),
                                                                              *model.named_buffers()]]
    assert all(n in state for n, _ in named) and all(holder.get_parameter(n) is p for n, p in holder.named_parameters())
