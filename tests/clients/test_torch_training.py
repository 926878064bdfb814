"""Training with rematerialize(): same losses, gradients and buffers as the unpatched model, and the
memory the plan promises, on five real models and plans from several strategies and budgets."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch_models import MODELS  # noqa: E402

from remat.clients.torch import activation_peak, export_graph, rematerialize  # noqa: E402
from remat.schedules import (  # noqa: E402
    Graph,
    Plan,
    Schedule,
    checkpoint_all_schedule,
    plan_from_schedule,
    recompute_closure,
)
from remat.solvers import STRATEGIES  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 3
#: (model, strategy, budget as a fraction of the checkpoint-all activation peak): every model without
#: and with rematerialization, under two baselines and the MILP (on a graph it solves in seconds).
PLANS = [(name, "checkpoint-all", 1.0) for name in MODELS] + [
    ("mlp", "ap-greedy", 0.7), ("resnet", "linearized-greedy", 0.6), ("unet", "ap-greedy", 0.7),
    ("gpt", "linearized-greedy", 0.5), ("lstm", "linearized-greedy", 0.7),
]
if "checkmate" in STRATEGIES:
    PLANS.append(("resnet", "checkmate", 0.7))

_graphs: dict[str, Graph] = {}


def _model(name: str):
    torch.manual_seed(0)
    return MODELS[name]()


def _graph(name: str) -> Graph:
    """The model's exported graph (deterministic under the roofline costs), made once per session."""
    if name not in _graphs:
        model, inputs, loss_fn = _model(name)
        _graphs[name] = export_graph(model, inputs, loss_fn=loss_fn)
    return _graphs[name]


def _budget(graph: Graph, ratio: float) -> int:
    return graph.fixed_memory + int(ratio * (graph.checkpoint_all_peak - graph.fixed_memory))


def _train_side_by_side(model, ref, rm, inputs, loss_fn) -> list[int]:
    """STEPS optimizer steps of the patched and the unpatched model, checked equal; activation peaks measured."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    peaks = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        opt_ref.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []

        def run(losses=losses):
            losses.append(rm(*inputs))
            losses[-1].backward()

        torch.manual_seed(100 + step)
        if step == 0:
            run()  # warm-up outside the tracker
        else:
            peaks.append(activation_peak(run, model.parameters()))
        torch.manual_seed(100 + step)
        expected = loss_fn(ref, *inputs)
        expected.backward()
        torch.testing.assert_close(losses[-1], expected, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=f"gradient of {name}")
        opt.step()
        opt_ref.step()
    for (name, b), c in zip(model.named_buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6, msg=f"buffer {name}")
    return peaks


@pytest.mark.parametrize("name,strategy,ratio", PLANS, ids=[f"{n}-{s}@{r}" for n, s, r in PLANS])
def test_training_follows_the_plan(name, strategy, ratio):
    graph = _graph(name)
    budget = _budget(graph, ratio)
    model, inputs, loss_fn = _model(name)
    ref = copy.deepcopy(model)
    rm = rematerialize(model, inputs, budget=budget, strategy=strategy, loss_fn=loss_fn, time_limit_s=20)
    assert rm.graph.sha256 == graph.sha256
    assert rm.result["status"] in ("optimal", "feasible") and rm.simulation.peak_memory <= budget

    peaks = _train_side_by_side(model, ref, rm, inputs, loss_fn)

    simulated = rm.simulation.peak_memory - graph.fixed_memory
    # What the step holds besides what the tracker counts: state and inputs, and the gradients,
    # which the tracker leaves out and the graph counts as resident throughout.
    resident = sum(rm.fixed[k] for k in ("parameters", "buffers", "inputs", "gradients"))
    for peak in peaks:
        assert abs(peak - simulated) <= 0.05 * simulated, (peak, simulated)
        assert resident + peak <= budget


def _forced_dropout_replay(graph: Graph) -> dict:
    """A result whose plan keeps nothing random alive: every dropout is recomputed in the backward."""
    S = checkpoint_all_schedule(graph).S.copy()
    S[:, [v for v, n in enumerate(graph.nodes) if n.meta.get("rng")]] = False
    plan = plan_from_schedule(graph, Schedule(recompute_closure(graph, S), S))
    return {"format": "remat.result/v1", "status": "feasible", "strategy": "test", "graph_sha256": graph.sha256,
            "budget": graph.checkpoint_all_peak, "plan": plan.to_json(graph)}


def test_two_plans_with_dropout_give_the_same_gradients():
    graph = _graph("gpt")
    replay = _forced_dropout_replay(graph)
    computes = [graph.nodes[v].id for op, v in Plan.from_json(graph, replay["plan"]).steps if op == "compute"]
    assert any(computes.count(n.id) > 1 for n in graph.nodes if n.meta.get("rng")), "dropout is not recomputed"

    grads = []
    for result in (replay, None, "eager"):
        model, inputs, loss_fn = _model("gpt")
        torch.manual_seed(7)
        if result == "eager":
            loss_fn(model, *inputs).backward()
        else:
            rm = rematerialize(model, inputs, budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn,
                               result=result)
            torch.manual_seed(7)
            rm(*inputs).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for replayed, kept, eager in zip(*grads, strict=True):
        assert torch.equal(replayed, kept)
        torch.testing.assert_close(replayed, eager, rtol=1e-5, atol=1e-6)
    assert any(g.abs().sum().item() > 0 for g in grads[0])


def test_batch_norm_statistics_update_once_per_step():
    model, inputs, loss_fn = _model("resnet")
    rm = rematerialize(model, inputs, budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn)
    for _ in range(3):
        rm(*inputs).backward()
    tracked = {name: int(b) for name, b in model.named_buffers() if name.endswith("num_batches_tracked")}
    assert tracked and set(tracked.values()) == {3}


def test_plans_come_from_a_remat_service_too(tmp_path):
    from processes import Processes

    procs = Processes(tmp_path, {"REMAT_DATA_DIR": str(tmp_path / "data")})
    try:
        url = procs.server().url
        graph = _graph("unet")
        budget = _budget(graph, 0.7)
        model, inputs, loss_fn = _model("unet")
        ref = copy.deepcopy(model)
        rm = rematerialize(model, inputs, budget=budget, strategy="ap-greedy", server=url, loss_fn=loss_fn)
    finally:
        procs.stop_all()
    local = rematerialize(ref, inputs, budget=budget, strategy="ap-greedy", loss_fn=loss_fn)
    assert rm.result["plan"] == local.result["plan"] and rm.simulation.peak_memory <= budget
    _train_side_by_side(model, copy.deepcopy(ref), rm, inputs, loss_fn)
