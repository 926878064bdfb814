"""Capture and export: producer nodes, storage sizes, fixed memory, kinds; clear errors; remat profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch_models import MODELS  # noqa: E402

from remat.clients.cli import main  # noqa: E402
from remat.clients.torch import CaptureError, PlanRejected, capture, export_graph, rematerialize  # noqa: E402
from remat.schedules import Graph  # noqa: E402

pytestmark = pytest.mark.torch

_VIEW_OPS = ("aten.t.", "aten.view.", "aten.transpose.", "aten.expand.", "aten.detach.", "aten.permute.",
             "aten.unsqueeze.", "aten.squeeze.", "aten.select.", "aten.slice.", "aten.split.", "aten._unsafe_view.")


def _made(name: str):
    torch.manual_seed(0)
    return MODELS[name]()


def test_export_keeps_producers_and_folds_views_and_getitems():
    model, inputs, loss_fn = _made("gpt")
    with capture(model, inputs, loss_fn=loss_fn) as cap:
        joint = cap.joint
        calls = [n for n in joint.module.graph.nodes if n.op == "call_function"]
    assert {p.name for p in joint.producers}.isdisjoint(joint.parent)
    assert len(joint.producers) + len(joint.parent) == len(calls)
    assert not any(p.op.startswith(_VIEW_OPS) or "getitem" in p.op for p in joint.producers)
    assert any(c.target.__name__ == "getitem" for c in calls if c.name in joint.parent)
    for name, parent in joint.parent.items():
        assert joint.root[name] == joint.root.get(parent, parent)


def test_memory_is_output_storage_and_fixed_memory_is_what_stays():
    model, (x, y), loss_fn = _made("mlp")
    graph = export_graph(model, (x, y), loss_fn=loss_fn)
    activation = x.numel() * 4
    nodes = {n.id: n for n in graph.nodes}
    forward_matmuls = [n for n in graph.nodes if n.meta["op"] == "aten.addmm.default"]
    assert len(forward_matmuls) == len(model.layers)
    assert all(n.memory == activation for n in forward_matmuls)
    assert all(nodes[i].memory == activation for i in nodes if nodes[i].meta["op"] == "aten.tanh.default")

    with capture(model, (x, y), loss_fn=loss_fn) as cap:
        fixed = cap.joint.fixed
    params = sum(p.numel() * 4 for p in model.parameters())
    assert fixed["parameters"] == params
    assert fixed["gradients"] == params
    assert fixed["inputs"] == x.numel() * 4 + y.numel() * 4
    assert fixed["outputs"] == 4 and fixed["tangents"] == 4
    assert graph.fixed_memory == sum(fixed.values())
    # Gradients are fixed memory: the nodes that make them hold nothing extra.
    assert sum(n.memory for n in graph.nodes if n.kind == "backward" and n.meta["op"] == "aten.mm.default") \
        == activation * (len(model.layers) - 1)


def test_multi_output_ops_count_every_output_and_buffers_count_as_fixed():
    model, inputs, loss_fn = _made("resnet")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    with capture(model, inputs, loss_fn=loss_fn) as cap:
        fixed = cap.joint.fixed
        vals = {n.name: n.meta.get("val") for n in cap.joint.module.graph.nodes}
    assert fixed["buffers"] == sum(b.numel() * b.element_size() for b in model.buffers())
    norms = [n for n in graph.nodes if "batch_norm_legit_functional" in n.meta["op"]]
    assert norms
    for n in norms:
        out, mean, invstd, _, _ = vals[n.id]  # new running stats are outputs of the step: fixed memory
        assert n.memory == out.untyped_storage().nbytes() + mean.untyped_storage().nbytes() \
            + invstd.untyped_storage().nbytes()


def test_dropout_is_one_node_with_its_mask_and_marked_random():
    model, inputs, loss_fn = _made("gpt")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    drops = [n for n in graph.nodes if n.meta["op"] == "aten.native_dropout.default"]
    assert drops and all(n.meta.get("rng") for n in drops)
    assert not any(n.meta.get("rng") for n in graph.nodes if n not in drops)
    for n in drops:
        assert n.memory > 0 and n.memory % 5 == 0  # float32 output + bool mask: 4 + 1 bytes an element


@pytest.mark.parametrize("name", list(MODELS))
def test_kind_comes_from_the_structure(name):
    model, inputs, loss_fn = _made(name)
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    assert Graph.from_json(json.loads(json.dumps(graph.to_json()))).sha256 == graph.sha256
    backward = graph.backward
    assert backward.any() and not backward.all()
    for node in graph.nodes:
        if node.kind == "forward":
            assert not any(backward[u] for u in node.deps), node.id


class _Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.sum() > 0:
            h = h * 2
        return h.mean()


class _Gathers(_Branches):
    def forward(self, x):
        h = self.lin(x)
        return h[torch.nonzero(h > 0, as_tuple=True)].sum()


class _NoLoss(_Branches):
    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("model,words", [
    (_Branches(), "control flow depends on tensor values"),
    (_Gathers(), "output shape depends on tensor values"),
    (_NoLoss(), "scalar loss"),
    (nn.Linear(4, 4).requires_grad_(False), "does not depend on any parameter"),
])
def test_models_that_cannot_be_captured_get_a_clear_error(model, words):
    loss_fn = (lambda m, x: m(x).sum()) if isinstance(model, nn.Linear) else None
    with pytest.raises(CaptureError, match=words):
        rematerialize(model, (torch.randn(3, 4),), budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn)


def test_plans_that_do_not_fit_or_do_not_simulate_are_refused():
    model, inputs, loss_fn = _made("mlp")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    with pytest.raises(PlanRejected, match="infeasible"):
        rematerialize(model, inputs, budget=graph.min_feasible_budget - 1, strategy="checkpoint-all",
                      loss_fn=loss_fn)
    fits = rematerialize(model, inputs, budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn).result
    with pytest.raises(PlanRejected, match="over the budget"):
        rematerialize(model, inputs, budget=graph.checkpoint_all_peak - 1, loss_fn=loss_fn, result=fits)
    broken = {**fits, "plan": fits["plan"][1:]}
    with pytest.raises(PlanRejected, match="does not simulate"):
        rematerialize(model, inputs, loss_fn=loss_fn, result=broken)


def test_calls_outside_the_captured_step_run_eagerly_and_other_shapes_are_refused():
    model, (x, y), loss_fn = _made("mlp")
    rm = rematerialize(model, (x, y), budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn)
    with torch.no_grad():
        assert torch.equal(rm(x, y), loss_fn(model, x, y))
    model.layers[0].eval()
    assert rm(x, y).grad_fn.name() != "CompiledFunctionBackward"
    model.train()
    assert rm(x, y).grad_fn.name() == "CompiledFunctionBackward"
    with pytest.raises(CaptureError, match="call rematerialize again"):
        rm(x[:3], y[:3])
    assert list(rm.parameters()) == list(model.parameters())


def test_cli_profile_writes_the_graph(tmp_path, capsys):
    models = str(Path(__file__).resolve().parent.parent / "torch_models.py")
    out = tmp_path / "mlp.json"
    assert main(["profile", f"{models}:mlp", "--batch-size", "16", "--output", str(out)]) == 0
    assert capsys.readouterr().err.startswith("MLP: ")
    graph = Graph.from_path(str(out))
    model, (x, y), loss_fn = MODELS["mlp"](batch_size=16)
    assert x.shape[0] == 16 and graph.size == export_graph(model, (x, y), loss_fn=loss_fn).size
    assert graph.cost_unit == "seconds (flops, cpu)"
    assert main(["profile", f"{models}:nothing"]) == 2
    assert "no callable 'nothing'" in capsys.readouterr().err


def test_a_graph_exported_earlier_is_reused_only_for_the_same_step():
    model, inputs, loss_fn = _made("mlp")
    graph = export_graph(model, inputs, loss_fn=loss_fn, device="h100")
    rm = rematerialize(model, inputs, budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn, graph=graph)
    assert rm.graph.sha256 == graph.sha256 and rm.graph.cost_unit == "seconds (flops, h100)"
    wider, wider_inputs, _ = MODELS["mlp"](width=96)
    with pytest.raises(CaptureError, match="no longer exports the graph"):
        rematerialize(wider, wider_inputs, budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn, graph=graph)
