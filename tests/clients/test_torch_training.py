"""Training with rematerialize(): same losses, gradients and buffers as the unpatched model, and the
memory the plan promises, on five real models and plans from several strategies and budgets; the
training loop as people write it (loss outside, new shapes, evaluation), the plan cache, state dicts."""

from __future__ import annotations

import copy
import dataclasses
import html
from collections import OrderedDict
from pathlib import Path

import httpx
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from factories import result_document  # noqa: E402
from torch import nn  # noqa: E402
from torch_models import MODELS, mlp  # noqa: E402

from remat.clients.torch import (  # noqa: E402
    PlanCache,
    activation_peak,
    allocator_peak,
    export_graph,
    max_batch,
    rematerialize,
)
from remat.schedules import (  # noqa: E402
    Graph,
    InvalidRequest,
    Plan,
    Schedule,
    by_module,
    checkpoint_all_schedule,
    format_size,
    plan_from_schedule,
    recompute_closure,
    simulate,
)
from remat.solvers import STRATEGIES, ResultDocument  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 3
#: (model, strategy, budget as a fraction of the checkpoint-all activation peak): every model without
#: and with rematerialization, under two baselines and the MILP (on a graph it solves in seconds).
PLANS = [(name, "checkpoint-all", 1.0) for name in MODELS] + [
    ("mlp", "ap-greedy", 0.7), ("resnet", "linearized-greedy", 0.75), ("unet", "ap-greedy", 0.9),
    ("gpt", "linearized-greedy", 0.65), ("lstm", "linearized-greedy", 0.7),
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


def _train_side_by_side(model, ref, rm, inputs, loss_fn) -> list[tuple[int, int]]:
    """STEPS optimizer steps of the patched and the unpatched model, checked equal; activation peaks measured
    by a dispatcher mode (LiveBytes) and by the allocator, which also sees what kernels allocate inside ops."""
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
            seen: list[int] = []
            by_allocator = allocator_peak(lambda seen=seen: seen.append(activation_peak(run, model.parameters())))
            peaks.append((seen[0], by_allocator))
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
    assert rm.result.status in ("optimal", "feasible") and rm.simulation.peak_memory <= budget

    peaks = _train_side_by_side(model, ref, rm, inputs, loss_fn)

    # The tracker counts what the step allocates, gradients included; the plan adds what is resident anyway
    # (state and inputs). Batch norm's new running statistics are counted to the end of the step (they go at
    # the end of the forward) and so are copies of the old ones (a bound), and so are the random states of
    # dropouts computed again (made at the first compute, gone after the last), and so are the largest of the
    # kernels' small workspaces: by the allocator's count, the plan is exact up to those. A dispatcher mode
    # does not see the workspaces at all.
    joint = rm.plans[0].joint
    planned = rm.plans[0].simulation.peak_memory - joint.resident_memory
    slack = 2 * joint.fixed["mutated_copies"] + joint.fixed["rng_states"]
    for seen, by_allocator in peaks:
        assert planned - slack - joint.fixed["small_workspaces"] <= by_allocator <= planned, (by_allocator, planned)
        assert planned - slack - joint.largest_workspace <= seen <= planned, (seen, planned)


def test_the_largest_batch_found_trains_within_the_device_budget():
    torch.manual_seed(0)
    model, _, loss_fn = mlp(width=128, depth=8)
    ref = copy.deepcopy(model)

    def batch(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(b, 128), torch.randn(b, 128)

    budget = 2 * 2**20
    with pytest.raises(InvalidRequest, match="Cannot read 'lots' as a size"):        # before any capture
        max_batch(model, batch, "lots", loss_fn=loss_fn)
    with pytest.raises(InvalidRequest, match="two or more distinct batch sizes"):
        max_batch(model, batch, budget, batches=(8, 8), loss_fn=loss_fn)
    answer = max_batch(model, batch, budget, batches=(4, 8, 16), loss_fn=loss_fn, time_limit_s=10)
    everything = max_batch(model, batch, budget, batches=(4, 8), loss_fn=loss_fn, strategy="checkpoint-all")
    assert answer.batch > everything.batch > 16         # beyond the batches captured: found on the fitted lines
    result = answer.result
    assert result is not None and result.fits and result.overhead <= answer.trials[-1].max_overhead

    inputs = batch(answer.batch)
    captured = export_graph(model, inputs, loss_fn=loss_fn)
    assert [n.memory for n in captured.nodes] == [n.memory for n in result.graph.nodes]     # bytes are exact lines
    rm = rematerialize(model, inputs, budget=budget, loss_fn=loss_fn, time_limit_s=10)
    peaks = _train_side_by_side(model, ref, rm, inputs, loss_fn)
    planned = rm.plans[0].simulation.peak_memory - rm.plans[0].joint.resident_memory
    assert max(max(pair) for pair in peaks) <= planned


def _forced_dropout_replay(graph: Graph) -> ResultDocument:
    """A result whose plan keeps nothing random alive: every dropout is recomputed in the backward."""
    S = checkpoint_all_schedule(graph).S.copy()
    S[:, [v for v, n in enumerate(graph.nodes) if n.meta.get("rng")]] = False
    plan = plan_from_schedule(graph, Schedule(recompute_closure(graph, S), S))
    return result_document(strategy="test", graph_sha256=graph.sha256, budget=graph.checkpoint_all_peak,
                           plan=plan.to_json(graph))


def test_two_plans_with_dropout_give_the_same_gradients():
    graph = _graph("gpt")
    replay = _forced_dropout_replay(graph)
    computes = [graph.nodes[v].id for op, v in Plan.from_json(graph, replay.plan).steps if op == "compute"]
    assert any(computes.count(n.id) > 1 for n in graph.nodes if n.meta.get("rng")), "dropout is not recomputed"

    grads = []
    for result in (replay, None, "eager"):
        model, inputs, loss_fn = _model("gpt")
        torch.manual_seed(7)
        if result == "eager":
            loss_fn(model, *inputs).backward()
        else:
            rm = rematerialize(model, inputs, activation_budget=1.0, strategy="checkpoint-all", loss_fn=loss_fn,
                               result=result)
            torch.manual_seed(7)
            rm(*inputs).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for replayed, kept, eager in zip(*grads, strict=True):
        assert torch.equal(replayed, kept)
        torch.testing.assert_close(replayed, eager, rtol=1e-5, atol=1e-6)
    assert any(g.abs().sum().item() > 0 for g in grads[0])


def test_a_plan_is_simulated_with_the_random_states_it_saves():
    """The graph counts a saved random state for every dropout, and one more for the generator's own, put aside
    while a dropout draws again; the plan chosen is simulated with those of the dropouts it computes again only."""
    graph = _graph("gpt")
    for result in (_forced_dropout_replay(graph), None):
        model, inputs, loss_fn = _model("gpt")
        rm = rematerialize(model, inputs, activation_budget=1.0, strategy="checkpoint-all", loss_fn=loss_fn,
                           result=result)
        joint = rm.plans[0].joint
        computes = [graph.nodes[v].id for op, v in rm.plan.steps if op == "compute"]
        kept = [b for op, b in joint.rng_states.items() if computes.count(op) > 1]
        assert joint.fixed["rng_states"] > 0 and bool(kept) == (result is not None)
        unsaved = joint.fixed["rng_states"] - (sum(kept) + max(kept, default=0))
        assert unsaved == (0 if result else joint.fixed["rng_states"])
        assert rm.simulation.peak_memory == simulate(graph, rm.plan).peak_memory - unsaved


def test_batch_norm_statistics_update_once_per_step():
    model, inputs, loss_fn = _model("resnet")
    rm = rematerialize(model, inputs, activation_budget=0.75, loss_fn=loss_fn, strategy="linearized-greedy")
    assert rm.simulation.recomputations > 0
    for _ in range(3):
        rm(*inputs).backward()
    tracked = {name: int(b) for name, b in model.named_buffers() if name.endswith("num_batches_tracked")}
    assert tracked and set(tracked.values()) == {3}


def test_the_loop_as_people_write_it_loss_outside_new_shapes_and_evaluation():
    model, (idx, targets), _ = _model("gpt")
    ref = copy.deepcopy(model)
    rm = rematerialize(model, idx, activation_budget=0.7, strategy="linearized-greedy")
    assert len(rm.plans) == 1 and rm.plans[0].source == "solved"

    def natural(m, x, y):
        logits = m(x)                                   # non-scalar output, loss computed outside
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        return loss

    for batch in (slice(None), slice(0, 2)):            # a smaller last batch is planned, not refused
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        loss = natural(rm, idx[batch], targets[batch])
        torch.manual_seed(3)
        expected = natural(ref, idx[batch], targets[batch])
        assert torch.equal(loss, expected)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    assert len(rm.plans) == 2 and rm.plans[1].graph.sha256 != rm.plans[0].graph.sha256

    model.eval()
    ref.eval()
    with torch.no_grad():
        assert torch.equal(rm(idx), ref(idx))
    assert len(rm.plans) == 2  # evaluation has no backward to plan


def test_a_script_run_again_takes_its_plans_from_the_cache(tmp_path):
    cache = PlanCache(tmp_path / "plans")
    model, inputs, loss_fn = _model("mlp")
    first = rematerialize(model, inputs, activation_budget=0.7, loss_fn=loss_fn, cache=cache, time_limit_s=10)
    again = rematerialize(copy.deepcopy(model), inputs, activation_budget=0.7, loss_fn=loss_fn, cache=cache,
                          time_limit_s=10)
    assert first.plans[0].source == "solved" and again.plans[0].source == "cache"
    assert again.result == first.result and len(list((tmp_path / "plans").glob("*.json"))) == 1
    other = rematerialize(model, inputs, activation_budget=0.8, loss_fn=loss_fn, cache=cache, time_limit_s=10)
    assert other.plans[0].source == "solved"  # another budget is another plan


def test_a_script_run_again_follows_its_cached_plan_when_workspaces_measure_otherwise(tmp_path, monkeypatch):
    # On CUDA a kernel's workspace measured in another process may differ (cuDNN's choice, the allocator's state):
    # the graph hashes otherwise, and the cached plan is simulated again on it instead of being solved again.
    import remat.clients.torch._workspace as workspace

    cache = PlanCache(tmp_path / "plans")
    budget = _budget(_graph("resnet"), 0.8)
    model, inputs, loss_fn = _model("resnet")
    first = rematerialize(model, inputs, budget=budget, loss_fn=loss_fn, cache=cache)
    cached = rematerialize(copy.deepcopy(model), inputs, budget=budget, loss_fn=loss_fn, cache=cache)
    monkeypatch.setattr(workspace, "_measured", OrderedDict((k, v + 512) for k, v in workspace._measured.items()))
    again = rematerialize(copy.deepcopy(model), inputs, budget=budget, loss_fn=loss_fn, cache=cache)
    assert cached.plans[0].source == again.plans[0].source == "cache"
    assert again.graph.sha256 != first.graph.sha256 and again.result.graph_sha256 == again.graph.sha256
    assert again.result.plan == first.result.plan and "measured again" in again.result.log[-1]
    assert again.result.peak_memory == simulate(again.graph, again.plans[0].plan).peak_memory <= budget


class _SetsUpOnFirstCall(nn.Module):
    """A model whose first step sets an attribute its forward reads, as transformers' classifiers set
    ``config.problem_type``: TorchDynamo compiles the graph again for the next step."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.problem_type: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.problem_type is None:
            self.problem_type = "regression"
        return self.inner(x)


def test_the_first_step_follows_the_plan_rematerialize_made(monkeypatch):
    """A graph compiled again (a guard on the model's state failed) is measured once and solved once: it was
    measured and solved again, and the second solve could refuse a budget the first had planned."""
    import remat.clients.torch._backend as backend_module
    from remat.clients.torch._planning import Planner

    calls = {"costs": 0, "solves": 0}
    node_costs, solve = backend_module.node_costs, Planner._solve

    def counted_costs(*args, **kwargs):
        calls["costs"] += 1
        return node_costs(*args, **kwargs)

    def counted_solve(self, *args, **kwargs):
        calls["solves"] += 1
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(backend_module, "node_costs", counted_costs)
    monkeypatch.setattr(Planner, "_solve", counted_solve)
    inner, inputs, loss_fn = _model("mlp")
    model = _SetsUpOnFirstCall(inner)
    rm = rematerialize(model, inputs, activation_budget=0.6, loss_fn=loss_fn, cost_model="measured", cache=False,
                       time_limit_s=10, progress=False)
    for _ in range(2):
        model.zero_grad()
        rm(*inputs).backward()
    assert len(rm.plans) == 2 and calls == {"costs": 1, "solves": 1}
    assert [p.result for p in rm.plans[1:]] == [rm.plans[0].result] * (len(rm.plans) - 1)


def test_plan_cache_is_bounded_and_survives_damaged_files(tmp_path):
    cache = PlanCache(tmp_path, max_entries=3)
    for k in range(5):
        cache.put(f"k{k}", result_document(budget=k))
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == ["k2", "k3", "k4"]
    (tmp_path / "k3.json").write_text("{not json")
    assert cache.get("k3") is None and not (tmp_path / "k3.json").exists()
    (tmp_path / "k2.json").write_text('{"status": "feasible"}')  # JSON, not a remat.result/v1
    assert cache.get("k2") is None and not (tmp_path / "k2.json").exists()
    assert cache.get("k4") == result_document(budget=4)
    assert PlanCache.key("a" * 64, 10, "checkmate", {"time_limit_s": 5}) != PlanCache.key("a" * 64, 11, "checkmate",
                                                                                          {"time_limit_s": 5})


def test_state_dict_of_the_module_loads_into_the_model_as_it_is():
    model, inputs, loss_fn = _model("resnet")
    rm = rematerialize(model, inputs, activation_budget=1.0, strategy="checkpoint-all", loss_fn=loss_fn)
    rm(*inputs).backward()
    fresh, _, _ = MODELS["resnet"]()
    fresh.load_state_dict(rm.state_dict())
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    rm.load_state_dict(MODELS["resnet"]()[0].state_dict())
    assert list(rm.parameters()) == list(model.parameters())


def test_plans_come_from_a_remat_service_too(tmp_path):
    from processes import Processes

    procs = Processes(tmp_path, {"REMAT_DATA_DIR": str(tmp_path / "data")})
    try:
        url = procs.server().url
        graph = _graph("resnet")
        budget = _budget(graph, 0.75)
        model, inputs, loss_fn = _model("resnet")
        ref = copy.deepcopy(model)
        rm = rematerialize(model, inputs, budget=budget, strategy="linearized-greedy", server=url, loss_fn=loss_fn,
                           cache=False, time_limit_s=30)
        (job,) = httpx.get(f"{url}/v1/jobs").json()["jobs"]
        page = html.unescape(httpx.get(f"{url}/dashboard/jobs/{job['id']}").text)
    finally:
        procs.stop_all()
    explained = rm.explain()  # the dashboard's page reads the plan as explain() does: by module, line and fate
    assert explained.read.again and explained.live_at_peak
    for group in (*by_module(explained.live_at_peak)[:3], *by_module(explained.read.again)[:3]):
        assert f"<code>{group.module or '(the step)'}</code>" in page and format_size(group.bytes) in page
        assert all(f"<td>{v.line}</td><td><code>{v.op}</code></td>" in page for v in group.values[:8])
    local = rematerialize(ref, inputs, budget=budget, strategy="linearized-greedy", loss_fn=loss_fn, cache=False)
    assert rm.result.plan == local.result.plan and rm.simulation.peak_memory <= budget
    _train_side_by_side(model, copy.deepcopy(ref), rm, inputs, loss_fn)


class _TwoGraphs(torch.nn.Module):
    """A step that torch.compile splits in two graphs (without fullgraph=True)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(32, 32)
        self.second = torch.nn.Linear(32, 32)

    def forward(self, x):
        h = torch.tanh(self.first(x))
        torch._dynamo.graph_break()
        return torch.tanh(self.second(h)).pow(2).mean()


def test_graphs_of_one_step_share_a_byte_budget_in_the_order_they_run():
    from remat.clients.torch import backend

    torch.manual_seed(0)
    model, x = _TwoGraphs(), torch.randn(64, 32)
    ref = copy.deepcopy(model)
    budget = 10 * 2**20
    remat = backend(budget=budget, strategy="checkpoint-all")
    compiled = torch.compile(model, backend=remat, dynamic=False)
    compiled(x).backward()
    ref(x).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)

    first, second = remat.planned
    steps = [(op, first.graph.nodes[v].id) for op, v in first.plan.steps]
    from remat.clients.torch._lower import split_point

    held = int(first.simulation.timeline[split_point(first.joint, steps) - 1])
    # less its tangents: they come when its backward starts, made by the second graph's backward, which counts them
    assert first.budget == budget and second.budget == budget - (held - first.joint.fixed["tangents"])
    # the first graph holds its state and its output (the second graph's input) across the second
    assert held >= first.graph.fixed_memory and first.joint.fixed["outputs"] == 64 * 32 * 4

    with pytest.raises(Exception, match=r"cannot be captured as one graph: torch.compile stops at .*graph_break"):
        rematerialize(_TwoGraphs(), (x,), activation_budget=1.0)


class _LossApart(torch.nn.Module):
    """A classifier whose loss is a graph of its own (a graph break before it): nothing there to recompute."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh())
                                         for _ in range(4)], torch.nn.Linear(32, 64))

    def forward(self, x, y):
        logits = self.net(x)
        torch._dynamo.graph_break()
        return torch.nn.functional.cross_entropy(logits, y)


def test_a_graph_that_cannot_hold_as_little_as_the_fraction_gets_its_leanest_plan():
    from remat.clients.torch import backend
    from remat.clients.torch._planning import Budget

    torch.manual_seed(0)
    model, x, y = _LossApart(), torch.randn(64, 32), torch.randint(0, 64, (64,))
    ref = copy.deepcopy(model)
    remat = backend(activation_budget=0.8, cache=False, progress=False)
    torch.compile(model, backend=remat, dynamic=False)(x, y).backward()
    ref(x, y).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    model_graph, loss_graph = remat.planned
    fraction = Budget.of(None, 0.8)
    assert model_graph.budget == fraction.bytes_for(model_graph.graph, model_graph.joint)
    assert loss_graph.budget > fraction.bytes_for(loss_graph.graph, loss_graph.joint)  # the leanest plan's peak


def test_a_graph_whose_fraction_is_under_its_floor_gets_the_leanest_plan_the_strategy_finds(monkeypatch):
    """As on FSDP2's block graphs, where checkpoint-last's plan holds more than checkpoint-all's: what is left is the
    strategy's own search, which a budget under the graph's floor never starts."""
    from remat.clients.torch import backend

    monkeypatch.setattr("remat.solvers.baselines._checkpoint.LARGEST_PLAN", 0)  # checkpoint-last declines
    torch.manual_seed(0)
    model, x, y = _LossApart(), torch.randn(64, 32), torch.randint(0, 64, (64,))
    remat = backend(activation_budget=0.01, cache=False, progress=False)
    torch.compile(model, backend=remat, dynamic=False)(x, y).backward()
    model_graph = remat.planned[0]
    assert model_graph.simulation.recomputations > 0
    assert model_graph.simulation.peak_memory < model_graph.graph.checkpoint_all_peak


def test_with_inductor_dropout_is_replayed_as_with_eager_kernels():
    model, inputs, loss_fn = _model("gpt")
    ref = copy.deepcopy(model)
    graph = rematerialize(copy.deepcopy(model), inputs, activation_budget=1.0, strategy="checkpoint-all",
                          loss_fn=loss_fn, compiler="inductor").graph
    replay = _forced_dropout_replay(graph)
    rm = rematerialize(model, inputs, loss_fn=loss_fn, compiler="inductor", result=replay)
    assert rm.result.plan == replay.plan  # kept as planned: each dropout computed again draws the same
    computes = [v for op, v in rm.plan.steps if op == "compute"]
    assert any(computes.count(v) > 1 for v, node in enumerate(graph.nodes) if node.meta.get("rng"))
    for step in range(2):  # the generator goes on as in the unpatched step: the second step draws anew
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        torch.manual_seed(5 + step)
        loss = rm(*inputs)
        loss.backward()
        torch.manual_seed(5 + step)
        expected = loss_fn(ref, *inputs)
        expected.backward()
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


def test_gradient_accumulation_has_a_plan_of_its_own_that_counts_the_gradients_held():
    model, inputs, loss_fn = _model("gpt")
    ref = copy.deepcopy(model)
    rm = rematerialize(model, inputs, activation_budget=0.7, loss_fn=loss_fn, strategy="linearized-greedy")
    micro = [tuple(t[k::2] for t in inputs) for k in range(2)]  # two micro-batches a step
    for step in range(2):
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        peaks = []
        for batch in micro:
            torch.manual_seed(step)
            peaks.append(activation_peak(lambda b=batch: rm(*b).backward(), model.parameters()))
            torch.manual_seed(step)
            loss_fn(ref, *batch).backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    fresh, adding = rm.plans[1:]  # the first plan is for the whole batch given to rematerialize()
    assert fresh.joint.fixed["gradients"] == 0
    assert adding.joint.fixed["gradients"] == sum(p.numel() * 4 for p in model.parameters())
    assert adding.budget == fresh.budget + adding.joint.fixed["gradients"]  # the same share of its activations
    for peak, planned in zip(peaks, (fresh, adding), strict=True):
        promised = planned.simulation.peak_memory - planned.joint.resident_memory  # what the step adds
        unseen = planned.joint.fixed["rng_states"] + planned.joint.largest_workspace  # by a dispatcher mode
        assert promised - unseen <= peak <= promised


@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss,
                                  lambda a, b: F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b))],
                         ids=["mse", "smooth-l1", "binary-cross-entropy"])
def test_a_loss_that_keeps_its_unreduced_buffer_is_counted_whole(loss):
    """On the CPU these return their scalar inside a buffer as large as their input, which the trace does not show."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh()) for _ in range(4)])
    x, y = torch.randn(256, 64), torch.randn(256, 64)
    rm = rematerialize(model, (x, y), activation_budget=1.0, strategy="checkpoint-all",
                       loss_fn=lambda m, a, b: loss(m(a), b))
    rm(x, y).backward()
    model.zero_grad(set_to_none=True)
    peak = activation_peak(lambda: rm(x, y).backward(), model.parameters())
    joint = rm.plans[0].joint  # a dispatcher mode sees all but the kernels' small workspaces
    assert peak == rm.simulation.peak_memory - joint.resident_memory - joint.fixed["small_workspaces"]
    assert rm.fixed["outputs"] == x.numel() * 4  # the loss's storage


def test_explain_says_what_is_live_at_the_peak_and_what_is_recomputed_by_module(tmp_path: Path):
    model, inputs, loss_fn = _model("gpt")
    rm = rematerialize(model, inputs, activation_budget=0.65, loss_fn=loss_fn, strategy="linearized-greedy")
    grads, buffers = [p.grad for p in model.parameters()], [b.clone() for b in model.buffers()]
    planned = rm.explain()
    assert planned.measured is None and planned.planned is rm.plans[-1]
    recomputed = [v for v in planned.values if v.computes > 1]
    assert recomputed and all(v.fate.startswith("recomputed x") for v in recomputed)
    assert {v.module for v in planned.values if v.kind == "forward"} >= {"blocks.0.attn", "blocks.1.mlp.0"}
    assert all(v.line.startswith("torch_models.py:") for v in planned.values if v.module.startswith("blocks."))
    assert sum(v.bytes for v in planned.live_at_peak) <= planned.planned_peak
    text = str(planned)
    assert "Live at the planned peak" in text and f"{len(recomputed)} of {len(planned.values)} values" in text
    assert 'data-series="planned"' in planned.plot() and 'data-series="measured"' not in planned.plot()

    measured = rm.explain(*inputs)  # one step measured: the plan's peak, the model left as it was
    assert measured.measured is not None
    slack = rm.fixed["rng_states"]
    assert measured.planned_peak - slack <= measured.measured.peak <= measured.planned_peak
    assert "Measured on one step" in str(measured)
    svg = measured.plot(tmp_path / "step.svg")
    assert (tmp_path / "step.svg").read_text() == svg
    assert 'data-series="planned"' in svg and 'data-series="measured"' in svg
    assert f"measured: peak {format_size(measured.measured.peak)}" in svg
    assert [p.grad for p in model.parameters()] == grads
    assert all(torch.equal(b, c) for b, c in zip(model.buffers(), buffers, strict=True))

    over = dataclasses.replace(measured, measured=dataclasses.replace(
        measured.measured, peak=measured.planned_peak + 1024, live_at_peak=(("aten.mm.default", 4096),)))
    assert "1.00 KiB OVER the plan's" in str(over) and "aten.mm.default" in str(over)
