"""The module rematerialize() returns is a module: a deep copy trains its own model with the plan, a pickled
or saved one loads and trains with it, a step runs under FlopCounterMode and other dispatch modes (the
planned graphs under the mode), and its parameters and buffers go by the model's own names."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_models import MODELS  # noqa: E402

from remat.clients.torch import rematerialize  # noqa: E402

pytestmark = pytest.mark.torch

PLANNED = {"activation_budget": 0.7, "strategy": "linearized-greedy", "cache": False, "progress": False}
"""A plan that recomputes, for the GPT of torch_models (dropout included), at its batch and at half of it."""


def _model(name: str = "gpt"):
    torch.manual_seed(0)
    return MODELS[name]()


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
