"""Training with plans that copy values to host memory and back: the unpatched model's gradients, the
plan's device bytes measured (LiveBytes, which counts host copies apart) and its host bytes, through
rematerialize() and through the torch.compile backend; the memory of a copy released when the plan's
timing says; the errors that name what to give instead.

Plans are made here, by the strategy of :func:`offload_saved`: every forward value the backward reads
goes to the host after its last forward reader and comes back right before its first backward reader.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from factories import result_document  # noqa: E402
from torch_models import gpt, mlp  # noqa: E402

import remat.solvers  # noqa: E402
from remat.clients.torch import LiveBytes, PlanRejected, backend, capture, check_result, rematerialize  # noqa: E402
from remat.clients.torch._measure import host_memory  # noqa: E402
from remat.clients.torch._offload import CHECK_COPIES, CopyMismatch, HostCopies  # noqa: E402
from remat.clients.torch._planning import OFFLOAD_STRATEGIES, default_strategy  # noqa: E402
from remat.clients.torch._transfer import device_link, transfer_for  # noqa: E402
from remat.schedules import Graph, InvalidRequest, Plan, Transfer, simulate  # noqa: E402
from remat.solvers import STRATEGIES, Outcome, Strategy  # noqa: E402

pytestmark = pytest.mark.torch

STEPS = 3


def offload_saved(graph: Graph, *, wait: bool = False) -> Plan:
    """Checkpoint-all, with every forward value the backward reads offloaded after its last forward reader
    and reloaded right before its first backward reader; with ``wait``, the computation waits for each copy."""
    forward = {v for v, node in enumerate(graph.nodes) if node.kind == "forward"}
    last_forward: dict[int, int] = {}
    first_backward: dict[int, int] = {}
    for w in range(graph.size):
        for u in graph.deps[w]:
            if u in forward and w in forward:
                last_forward[u] = w
            elif u in forward:
                first_backward.setdefault(u, w)
    moved = [u for u, w in first_backward.items() if graph.nodes[u].memory > 0 and last_forward.get(u, u) < w]
    offload_after: dict[int, list[int]] = {}
    reload_before: dict[int, list[int]] = {}
    for u in moved:
        offload_after.setdefault(last_forward.get(u, u), []).append(u)
        reload_before.setdefault(first_backward[u], []).append(u)
    dying: dict[int, list[int]] = {}
    for u, last in enumerate(graph.last_use):
        dying.setdefault(last, []).append(u)
    steps: list = []
    for v in range(graph.size):
        steps += [("reload", u) for u in reload_before.get(v, [])]
        steps.append(("compute", v))
        for u in offload_after.get(v, []):
            steps += [("offload", u), ("wait", u)] if wait else [("offload", u)]
        steps += [("free", u) for u in dying.get(v, [])]
    return Plan.of(steps)


@pytest.fixture
def offloading(monkeypatch: pytest.MonkeyPatch) -> str:
    """The strategy of :func:`offload_saved`, installed under its name for the test."""
    name = "offload-saved"
    strategy = Strategy(name, "Offload every value the backward reads.",
                        lambda graph, budget, ctx: Outcome(None, plan=offload_saved(graph)), offloads=True)
    monkeypatch.setitem(STRATEGIES, name, strategy)
    return name


def _seen_by_dispatch(planned) -> int:
    """What the plan promises the step adds, less the small kernel workspaces it holds through the step,
    which LiveBytes (a dispatcher mode) cannot see (these MLPs have no larger ones)."""
    assert planned.joint.largest_workspace == planned.joint.fixed["small_workspaces"]
    return planned.simulation.peak_memory - planned.joint.resident_memory - planned.joint.fixed["small_workspaces"]


def _train(loss, model, ref, expected) -> list[tuple[int, int]]:
    """STEPS optimizer steps of ``model`` (``loss()`` computes its loss) beside the unpatched ``ref``
    (``expected()``), checked bit-identical; every step after the first is measured: the device peak of its
    forward and backward (gradients included) and their host peak."""

    def run() -> torch.Tensor:
        value = loss()
        value.backward()
        return value.detach()

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    measured = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        opt_ref.zero_grad(set_to_none=True)
        torch.manual_seed(step)
        if step == 0:
            value = run()
        else:
            with LiveBytes() as live:
                value = run()
            measured.append((live.peak, live.host_peak))
        torch.manual_seed(step)
        reference = expected()
        reference.backward()
        assert torch.equal(value, reference)
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), f"gradient of {name}"
        opt.step()
        opt_ref.step()
    return measured


def test_a_transformer_trains_with_an_offload_plan(offloading):
    torch.manual_seed(0)
    model, inputs, loss_fn = gpt()
    ref = copy.deepcopy(model)
    rm = rematerialize(model, inputs, activation_budget=1.0, loss_fn=loss_fn, transfer="nvlink-c2c",
                       strategy=offloading, cache=False, progress=False)
    planned = rm.plans[0]
    assert planned.plan.has_transfers and planned.result.transfer == Transfer.from_profile(
        "nvlink-c2c", seconds_per_cost_unit=1.0)
    assert planned.simulation.peak_memory < 0.5 * rm.graph.checkpoint_all_peak

    # The graph counts a saved random state for each dropout (a bound made before there is a plan); this
    # plan computes each once and is simulated as run, without them. Its device bytes are measured to within
    # two layer norms' weight and bias gradients (counted with the op while both live, a bound of the graph)
    # and a kernel's workspace (dropout's noise), which the plan holds and a dispatcher mode does not see.
    assert planned.joint.fixed["rng_states"] > 0
    bound = simulate(planned.graph, planned.plan, transfer=planned.result.transfer)
    assert planned.simulation.peak_memory == bound.peak_memory - planned.joint.fixed["rng_states"]
    activations = planned.simulation.peak_memory - planned.joint.resident_memory
    for device, host in _train(lambda: rm(*inputs), model, ref, lambda: loss_fn(ref, *inputs)):
        assert activations - 2 * (2 * 32 * 4) - planned.joint.largest_workspace <= device <= activations
        assert host == planned.simulation.host_peak_memory > 0


def test_gpt2_from_transformers_trains_with_an_offload_plan(offloading):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    model = transformers.GPT2LMHeadModel(config).train()
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "labels": ids.clone()}
    rm = rematerialize(model, batch, activation_budget=1.0, transfer="pcie5-x16", strategy=offloading,
                       backward_from="loss", cache=False, progress=False)
    planned = rm.plans[0]
    assert planned.plan.has_transfers

    # Less where a layer norm's saved statistics or gradients are counted twice (with the op while both
    # live, a bound of the graph) when the peak comes.
    activations = planned.simulation.peak_memory - planned.joint.resident_memory
    for device, host in _train(lambda: rm(**batch).loss, model, ref, lambda: ref(**batch).loss):
        assert 0.99 * activations <= device <= activations
        assert host == planned.simulation.host_peak_memory > 0


def test_the_compile_backend_runs_offload_plans_too(offloading):
    torch.manual_seed(0)
    model, inputs, loss_fn = mlp()
    ref = copy.deepcopy(model)
    remat = backend(activation_budget=1.0, transfer="pcie5-x16", strategy=offloading, cache=False, progress=False)
    step = torch.compile(lambda x, y: loss_fn(model, x, y), backend=remat, fullgraph=True, dynamic=False)

    measured = _train(lambda: step(*inputs), model, ref, lambda: loss_fn(ref, *inputs))
    planned = remat.planned[0]
    assert planned.plan.has_transfers
    for device, host in measured:
        assert device == _seen_by_dispatch(planned)
        assert host == planned.simulation.host_peak_memory > 0


OFFLOADING = [name for name, strategy in STRATEGIES.items() if strategy.offloads]


@pytest.mark.parametrize("strategy", [None, *OFFLOADING], ids=["default", *OFFLOADING])
def test_the_plans_of_the_offloading_strategies_run_as_simulated(strategy):
    """Each strategy that offloads (and the one a transfer defaults to) plans the step, and it runs as planned."""
    torch.manual_seed(0)
    model, inputs, loss_fn = mlp()
    ref = copy.deepcopy(model)
    rm = rematerialize(model, inputs, activation_budget=0.7, loss_fn=loss_fn, transfer="pcie4-x16", strategy=strategy,
                       cache=False, progress=False, time_limit_s=20)
    planned = rm.plans[0]
    assert planned.result.strategy == (strategy or default_strategy(offload=True))
    assert planned.plan.has_transfers
    for device, host in _train(lambda: rm(*inputs), model, ref, lambda: loss_fn(ref, *inputs)):
        assert device == _seen_by_dispatch(planned)
        assert host == planned.simulation.host_peak_memory > 0


def test_device_memory_goes_when_the_plans_timing_releases_it():
    """Slow copies hold device memory longer: the runtime keeps each value until the plan releases it, so
    the measured peak follows the plan's, whatever the link; a plan that waits for its copies holds less."""
    torch.manual_seed(0)
    model, inputs, loss_fn = mlp(batch_size=1024)
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    fast, slow = Transfer(bandwidth=1e12), Transfer(bandwidth=1e9, latency=1e-6)
    peaks = {}
    for name, plan, transfer in [("fast", offload_saved(graph), fast), ("slow", offload_saved(graph), slow),
                                 ("slow, waiting", offload_saved(graph, wait=True), slow)]:
        simulation = simulate(graph, plan, transfer=transfer)
        result = result_document(graph_sha256=graph.sha256, strategy="offload-saved", budget=simulation.peak_memory,
                                 plan=plan.to_json(graph), transfer=transfer).to_json()  # as saved to a file
        m = copy.deepcopy(model)
        rm = rematerialize(m, inputs, loss_fn=loss_fn, result=result, cache=False, progress=False)
        rm(*inputs).backward()
        m.zero_grad(set_to_none=True)
        with LiveBytes() as live:
            rm(*inputs).backward()
        peaks[name] = live.peak
        assert peaks[name] == simulation.peak_memory - joint.resident_memory - joint.fixed["small_workspaces"]
        assert live.host_peak == simulation.host_peak_memory
    assert peaks["slow"] > peaks["slow, waiting"] == peaks["fast"]


def test_live_bytes_counts_host_copies_apart():
    with LiveBytes() as live:
        a = torch.ones(256)
        with host_memory():
            b = torch.empty(512)
        b.copy_(a.repeat(2))                 # 2 KiB on the device for a moment, copied to the host
    assert (live.peak, live.host_peak) == (3072, 2048)
    del a, b
    assert (live.current, live.host_current) == (0, 0)


def test_a_plan_over_the_host_budget_or_for_inductor_is_refused(offloading):
    torch.manual_seed(0)
    model, inputs, loss_fn = mlp()
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    transfer = Transfer(bandwidth=1e12)
    plan = offload_saved(graph)
    simulation = simulate(graph, plan, transfer=transfer)
    result = result_document(graph_sha256=graph.sha256, plan=plan.to_json(graph), transfer=transfer)
    assert check_result(graph, result, budget=simulation.peak_memory)[1].host_peak_memory > 0
    with pytest.raises(PlanRejected, match="host budget"):
        check_result(graph, result, budget=simulation.peak_memory, host_budget=simulation.host_peak_memory - 1)
    with pytest.raises(PlanRejected, match="only compiler='eager'"):
        rematerialize(model, inputs, activation_budget=1.0, loss_fn=loss_fn, transfer=transfer, strategy=offloading,
                      compiler="inductor", cache=False, progress=False)


def test_transfers_are_named_links_auto_on_cuda_or_parameters_in_the_graphs_units(monkeypatch):
    torch.manual_seed(0)
    model, inputs, loss_fn = mlp()
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    assert transfer_for("pcie4-x16", graph, joint) == Transfer(bandwidth=25e9)
    with pytest.raises(InvalidRequest, match="CUDA device"):
        transfer_for("auto", graph, joint)
    in_flops = Graph(graph.nodes, name=graph.name, fixed_memory=graph.fixed_memory, cost_unit="flops")
    with pytest.raises(InvalidRequest, match="in 'flops'"):
        transfer_for("pcie4-x16", in_flops, joint)
    with pytest.raises(InvalidRequest, match="pcie5-x16"):
        rematerialize(model, inputs, activation_budget=0.5, transfer="pcie9", strategy="checkmate")

    for gpu, link in {"NVIDIA GH200 480GB": "nvlink-c2c", "NVIDIA H100 80GB HBM3": "pcie5-x16",
                      "NVIDIA A100-SXM4-80GB": "pcie4-x16"}.items():
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, gpu=gpu: gpu)
        assert device_link(torch.device("cuda", 0)) == link

    # a registry without the defaults (a copy: removing and re-adding would reorder the real one)
    registry = {name: s for name, s in STRATEGIES.items() if name not in OFFLOAD_STRATEGIES}
    monkeypatch.setattr(remat.solvers, "STRATEGIES", registry)
    with pytest.raises(InvalidRequest, match="name one with strategy="):
        default_strategy(offload=True)
    registry["offload-window"] = STRATEGIES["checkpoint-all"]
    assert default_strategy(offload=True) == "offload-window"
    registry["checkmate-offload"] = STRATEGIES["checkmate"]
    assert default_strategy(offload=True) == "checkmate-offload"
    assert default_strategy(offload=False) == "checkmate"


def test_the_copy_check_finds_a_value_that_comes_back_changed(monkeypatch: pytest.MonkeyPatch):
    value = torch.arange(64, dtype=torch.float32).view(8, 8).t()  # a strided view: the whole storage travels
    copies = HostCopies(check=True)
    copies.made("v", value)
    host = copies.offload(value, "v", "v")
    back = copies.ready(copies.reload(host, "v"), "v")
    assert torch.equal(back, value) and back.stride() == value.stride()
    host = copies.offload(value, "v", "v")
    host[3] += 1  # what a copy that raced the compute would bring back
    with pytest.raises(CopyMismatch, match="v came back from host memory with other bytes"):
        copies.ready(copies.reload(host, "v"), "v")

    # the environment variable turns the check on for a whole training run: plans with copies run clean
    monkeypatch.setenv(CHECK_COPIES, "1")
    assert HostCopies().check and not HostCopies(check=False).check
    torch.manual_seed(0)
    model, inputs, loss_fn = mlp()
    ref = copy.deepcopy(model)
    rm = rematerialize(model, inputs, activation_budget=0.7, loss_fn=loss_fn, transfer="pcie4-x16", cache=False,
                       progress=False)
    assert rm.plan.has_transfers
    _train(lambda: rm(*inputs), model, ref, lambda: loss_fn(ref, *inputs))
