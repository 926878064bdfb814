"""Capture and export through TorchDynamo: producer nodes, storage sizes, fixed memory, outputs of
multi-output ops on their own, kinds; what torch.compile captures (keyword inputs, any outputs,
tensor constants, logging); clear errors that name what stops the capture and where; remat profile."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch_models import MODELS  # noqa: E402

from remat.clients.cli import main  # noqa: E402
from remat.clients.torch import CaptureError, PlanRejected, capture, export_graph, rematerialize  # noqa: E402
from remat.clients.torch._joint import STEP_END, _storages  # noqa: E402
from remat.clients.torch._workspace import WORKSPACE_NODE_BYTES  # noqa: E402
from remat.schedules import Graph  # noqa: E402

pytestmark = pytest.mark.torch

_VIEW_OPS = ("aten.t.", "aten.view.", "aten.transpose.", "aten.expand.", "aten.detach.", "aten.permute.",
             "aten.unsqueeze.", "aten.squeeze.", "aten.select.", "aten.slice.", "aten.split.", "aten._unsafe_view.")


def _made(name: str):
    torch.manual_seed(0)
    return MODELS[name]()


def test_export_keeps_producers_and_folds_views_and_getitems():
    model, inputs, loss_fn = _made("gpt")
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    calls = [n for n in joint.module.graph.nodes if n.op == "call_function"]
    assert {p.name for p in joint.producers}.isdisjoint(joint.parent)
    markers = [p for p in joint.producers if not p.runs_an_op and not p.output_of and not p.workspace_of]
    assert [p.name for p in markers] == [STEP_END]  # the step's end, holding every gradient until then
    workspaces = [p for p in joint.producers if p.workspace_of]  # what kernels allocate inside: dropout's noise
    assert workspaces and all(p.memory >= WORKSPACE_NODE_BYTES for p in workspaces)
    assert len(joint.producers) - len(markers) - len(workspaces) + len(joint.parent) == len(calls)
    assert not any(p.op.startswith(_VIEW_OPS) for p in joint.producers)
    assert all(p.op.endswith("]") and p.memory > 0 for p in joint.producers if p.output_of)
    assert any(c.target.__name__ == "getitem" for c in calls if c.name in joint.parent)
    for name, parent in joint.parent.items():
        assert joint.root[name] == joint.root.get(parent, parent)
    assert [n.id for n in graph.nodes] == [p.name for p in joint.producers]


def test_memory_is_output_storage_and_fixed_memory_is_what_stays():
    model, (x, y), loss_fn = _made("mlp")
    joint, graph = capture(model, (x, y), loss_fn=loss_fn)
    activation = x.numel() * 4
    nodes = {n.id: n for n in graph.nodes}
    forward_matmuls = [n for n in graph.nodes if n.meta["op"] == "aten.addmm.default"]
    assert len(forward_matmuls) == len(model.layers)
    assert all(n.memory == activation for n in forward_matmuls)
    assert all(nodes[i].memory == activation for i in nodes if nodes[i].meta["op"] == "aten.tanh.default")

    fixed = joint.fixed
    params = sum(p.numel() * 4 for p in model.parameters())
    assert fixed["parameters"] == params and fixed["gradients"] == 0
    assert fixed["inputs"] == x.numel() * 4 + y.numel() * 4
    assert fixed["outputs"] == 4 and fixed["tangents"] == 4
    assert graph.fixed_memory == sum(fixed.values())
    assert joint.resident_memory == params + fixed["inputs"]
    # The gradients are made by the backward (a weight's by a matmul, a bias's by a sum) and held to the end.
    end = graph.nodes[-1]
    assert end.id == STEP_END and end.memory == 0 and end.kind == "backward"
    assert sum(graph.nodes[u].memory for u in end.deps) == params


def test_gradients_the_parameters_already_hold_are_fixed_memory():
    model, (x, y), loss_fn = _made("mlp")
    loss_fn(model, x, y).backward()  # a step of gradient accumulation adds into these
    joint, graph = capture(model, (x, y), loss_fn=loss_fn)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert joint.fixed["gradients"] == params and joint.resident_memory == 2 * params + joint.fixed["inputs"]
    assert sum(graph.nodes[u].memory for u in graph.nodes[-1].deps) == params  # the new ones, made as before


def test_tied_weights_are_one_parameter_and_one_gradient():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.head = nn.Linear(16, 50, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, idx):
            return self.head(torch.tanh(self.embed(idx))).logsumexp(-1).mean()

    joint, graph = capture(Tied(), (torch.randint(0, 50, (4, 8)),))
    assert joint.fixed["parameters"] == 50 * 16 * 4
    gradients = graph.nodes[-1].deps
    assert len(gradients) == 1 and graph.nodes[gradients[0]].memory == 50 * 16 * 4


def test_each_output_of_a_multi_output_op_has_its_own_lifetime():
    model, inputs, loss_fn = _made("resnet")
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    vals = {n.name: n.meta.get("val") for n in joint.module.graph.nodes}
    nodes = {n.id: n for n in graph.nodes}
    norms = [n for n in graph.nodes if n.meta["op"] == "aten._native_batch_norm_legit_functional.default"]
    assert norms
    for n in norms:
        out, mean, invstd, new_mean, new_var = vals[n.id]
        assert n.memory == sum(t.untyped_storage().nbytes() for t in (out, mean, invstd, new_mean, new_var))
        # the saved statistics the backward reads are values of their own, taken out of the op at no cost
        parts = [p for p in joint.producers if p.output_of == n.id]
        sizes = sorted(t.untyped_storage().nbytes() for t in (mean, invstd))
        assert sorted(nodes[p.name].memory for p in parts) == sizes
        assert all(nodes[p.name].cost == 0 and nodes[p.name].deps == (graph.index[n.id],) for p in parts)
    # the new running statistics are outputs of the step: their readers do not keep the op alive
    assert joint.returned and all(joint.outputs[i] == name for name, i in joint.returned.items())
    backward_norms = [p for p in joint.producers if p.op == "aten.native_batch_norm_backward.default"]
    assert backward_norms and not any(set(p.deps) & {n.id for n in norms} for p in backward_norms)
    assert joint.fixed["buffers"] == sum(b.numel() * b.element_size() for b in model.buffers())


def test_dropout_keeps_its_mask_apart_when_its_output_is_not_needed_later():
    model, inputs, loss_fn = _made("gpt")
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    nodes = {n.id: n for n in graph.nodes}
    drops = [n for n in graph.nodes if n.meta["op"] == "aten.native_dropout.default"]
    assert drops and all(n.meta.get("rng") for n in drops)
    assert not any(n.meta.get("rng") for n in graph.nodes if n not in drops)
    assert all(n.memory % 5 == 0 for n in drops)  # float32 output + bool mask: 4 + 1 bytes an element
    masks = [p for p in joint.producers if p.op == "aten.native_dropout.default[1]"]
    # the residual dropouts feed an addition, whose backward needs neither input: only their masks
    # outlive them; the others feed a matmul or a norm, which read the output in the backward
    assert 0 < len(masks) < len(drops)
    assert all(nodes[m.output_of].memory == 5 * m.memory for m in masks)


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


class _Library(nn.Module):
    """What library models do: keyword inputs, a tensor constant, logging, a dict of outputs, an in-place op."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.log = logging.getLogger("remat.tests.library")

    def forward(self, x, *, scale, labels=None):
        self.log.warning("tracing: %s", x.shape)
        h = self.lin(x) * torch.tensor([0.5, 2.0]).repeat(4) * scale
        h.relu_()
        out = {"hidden": h, "pair": (h.sum(-1), h.mean())}
        if labels is not None:
            out["loss"] = (h - labels).pow(2).mean()
        return out


def test_keyword_inputs_constants_logging_and_any_outputs_are_captured():
    model = _Library()
    batch = {"x": torch.randn(3, 8), "scale": torch.tensor(3.0), "labels": torch.randn(3, 8)}
    joint, graph = capture(model, batch, backward_from=None)
    assert joint.fixed["constants"] == 2 * 4
    assert joint.fixed["inputs"] == (3 * 8 + 1 + 3 * 8) * 4
    assert len(joint.tangents) == 4  # hidden, the pair and the loss all carry gradients
    assert graph.size > 0
    from_the_loss, _ = capture(model, batch)  # by default the backward starts from the loss the step returns
    assert len(from_the_loss.tangents) == 1 and from_the_loss.fixed["tangents"] == 4


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


class _Reads(_Branches):
    def forward(self, x):
        h = self.lin(x)
        return h.mean() * h.max().item()


def test_a_scalar_read_with_item_stays_in_the_graph():
    torch.manual_seed(0)
    model, x = _Reads(), torch.randn(3, 4)
    rm = rematerialize(model, (x,), activation_budget=1.0, strategy="checkpoint-all")
    loss = rm(x)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = _Reads.forward(model, x)
    expected.backward()
    assert torch.equal(loss, expected)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))


@pytest.mark.parametrize("model,words", [
    (_Branches(), r"stops at .*test_torch_capture.py:\d+, in forward: `if h.sum\(\) > 0:` .*decides on a tensor's "),
    (_Gathers(), r"nonzero.* \(File .*test_torch_capture.py\", line \d+, in forward: `.*nonzero.*`\) makes a tensor "
                 r"whose size depends on tensor values.*Use fixed-size masks"),
])
def test_graph_breaks_are_named_with_where_they_are(model, words):
    with pytest.raises(CaptureError, match=words):
        rematerialize(model, (torch.randn(3, 4),), activation_budget=1.0, strategy="checkpoint-all")


def test_a_step_without_a_backward_says_so():
    frozen = nn.Linear(4, 4).requires_grad_(False)
    with pytest.raises(CaptureError, match="no backward pass"):
        rematerialize(frozen, (torch.randn(3, 4),), activation_budget=1.0, loss_fn=lambda m, x: m(x).sum())


def test_plans_that_do_not_fit_or_do_not_simulate_are_refused():
    model, inputs, loss_fn = _made("mlp")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    # the MLP's peak is at the end of its backward, where checkpoint-last holds no less than checkpoint-all
    refusal = (r"The leanest plan found peaks at .* \(a budget at or above it has a plan\); no plan can go below "
               r".* checkpoint-all's plan peaks at .*, the least of any found")
    with pytest.raises(PlanRejected, match=refusal):
        rematerialize(model, inputs, budget=graph.min_feasible_budget - 1, strategy="checkpoint-all",
                      loss_fn=loss_fn)
    fits = rematerialize(model, inputs, activation_budget=1.0, strategy="checkpoint-all", loss_fn=loss_fn).result
    with pytest.raises(PlanRejected, match="over the budget"):
        rematerialize(model, inputs, budget=graph.checkpoint_all_peak - 1, loss_fn=loss_fn, result=fits)
    broken = dataclasses.replace(fits, plan=fits.plan[1:])
    with pytest.raises(PlanRejected, match="does not simulate"):
        rematerialize(model, inputs, loss_fn=loss_fn, result=broken)


def test_on_graphs_too_large_for_the_leanest_baseline_the_refusal_quotes_the_strategys_own_plan(monkeypatch):
    monkeypatch.setattr("remat.solvers.baselines._checkpoint.LARGEST_PLAN", 0)  # checkpoint-last declines
    model, inputs, loss_fn = _made("mlp")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    refusal = (r"The leanest plan found peaks at .* \(a budget at or above it has a plan\); no plan can go below "
               r".* checkpoint-all's plan peaks at .*, the least of any found")
    with pytest.raises(PlanRejected, match=refusal):
        rematerialize(model, inputs, budget=graph.min_feasible_budget, strategy="checkpoint-all", loss_fn=loss_fn)


def test_a_budget_the_strategy_misses_gets_the_plan_of_the_leanest_baseline():
    model, inputs, loss_fn = _made("lstm")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    leanest = rematerialize(model, inputs, budget=graph.checkpoint_all_peak, loss_fn=loss_fn,
                            strategy="checkpoint-last")
    budget = leanest.simulation.peak_memory  # checkpoint-all does not fit this; checkpoint-last does
    rm = rematerialize(model, inputs, budget=budget, loss_fn=loss_fn, strategy="checkpoint-all")
    assert rm.result.strategy == "checkpoint-last" and rm.simulation.peak_memory <= budget
    assert "checkpoint-all found no plan within the budget" in " ".join(rm.result.log)


def test_budgets_are_bytes_or_a_fraction_of_the_activation_memory():
    model, inputs, loss_fn = _made("mlp")
    with pytest.raises(Exception, match="exactly one of budget="):
        rematerialize(model, inputs, loss_fn=loss_fn)
    with pytest.raises(Exception, match=r"activation_budget must be a fraction in \(0, 1\]"):
        rematerialize(model, inputs, activation_budget=1.5, loss_fn=loss_fn)
    part = rematerialize(model, inputs, activation_budget=0.7, loss_fn=loss_fn, time_limit_s=20)
    planned = part.plans[0]
    activation = planned.graph.checkpoint_all_peak - planned.joint.resident_memory
    assert planned.budget == planned.joint.resident_memory + math.ceil(0.7 * activation)
    assert planned.simulation.peak_memory <= planned.budget


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
    rm = rematerialize(model, inputs, activation_budget=1.0, strategy="checkpoint-all", loss_fn=loss_fn, graph=graph)
    assert rm.graph.sha256 == graph.sha256 and rm.graph.cost_unit == "seconds (flops, h100)"
    wider, wider_inputs, _ = MODELS["mlp"](width=96)
    with pytest.raises(CaptureError, match="no longer exports the graph"):
        rematerialize(wider, wider_inputs, activation_budget=1.0, strategy="checkpoint-all", loss_fn=loss_fn,
                      graph=graph)


def test_a_cuda_value_counts_the_bytes_the_caching_allocator_hands_out():
    """torch.cuda.max_memory_allocated counts each allocation rounded up to 512 bytes: so does the plan."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # CUDA tensors without a GPU: only their metadata is read
        on_gpu = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (0, 1, 512, 513, 4000)]
        on_cpu = torch.empty(513, dtype=torch.uint8)
    assert [_storages(t)[0][1] for t in on_gpu] == [0, 512, 512, 1024, 4096]
    assert _storages(on_cpu)[0][1] == 513


class _MaskedAttention(nn.Module):
    """Attention given its causal mask as a tensor built from constants, as transformers 5.17 builds it traced (or
    ``future``: a mask that is not causal, which must stay), or from its input (which is no constant)."""

    def __init__(self, mask: str = "causal") -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.mask = mask

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 12, 3, 2, 8).permute(2, 0, 3, 1, 4)
        keys, queries = torch.arange(12)[None, None, None, :], torch.arange(12)[None, None, :, None]
        mask = (keys >= queries if self.mask == "future" else keys <= queries).expand(2, -1, 12, 12)
        if self.mask == "input":
            mask = mask & (x[:, None, None, :, 0] > -1e9)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).square().mean()


@pytest.mark.parametrize("mask", ["causal", "future", "input"])
def test_a_constant_causal_mask_runs_as_is_causal_with_the_same_gradients(mask):
    torch.manual_seed(0)
    model, x = _MaskedAttention(mask), torch.randn(2, 12, 16)
    joint, _ = capture(model, (x,))
    compared = {n.target for n in joint.module.graph.nodes if n.op == "call_function"}
    assert (torch.ops.aten.le.Tensor in compared or torch.ops.aten.ge.Tensor in compared) == (mask != "causal")
    expected = torch.autograd.grad(model(x), list(model.parameters()))
    got = torch.autograd.grad(rematerialize(model, (x,), activation_budget=1.0)(x), list(model.parameters()))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
