"""Cost models (roofline against a device profile, measured per node) and the memory and time measurements."""

from __future__ import annotations

import doctest
import importlib
import math
import pkgutil

import pytest

torch = pytest.importorskip("torch")

from torch_models import MODELS  # noqa: E402

import remat.clients.torch as client  # noqa: E402
import remat.clients.torch._workspace as workspace  # noqa: E402
from remat.clients.torch import (  # noqa: E402
    COST_MODELS,
    DEVICE_PROFILES,
    LiveBytes,
    activation_peak,
    allocator_peak,
    capture,
    export_graph,
    node_costs,
    time_call,
)
from remat.clients.torch._joint import STEP_END  # noqa: E402
from remat.clients.torch._workspace import WORKSPACE_NODE_BYTES, _OpRun  # noqa: E402
from remat.schedules import InvalidRequest  # noqa: E402

pytestmark = pytest.mark.torch


def _made(name: str):
    torch.manual_seed(0)
    return MODELS[name]()


def test_roofline_cost_of_a_matmul_is_its_flops_or_bytes_on_the_device():
    model, (x, y), loss_fn = _made("mlp")
    width = model.layers[0][0].in_features
    batch = x.shape[0]
    for device in ("cpu", "h100"):
        graph = export_graph(model, (x, y), loss_fn=loss_fn, device=device)
        profile = DEVICE_PROFILES[device]
        first = next(n for n in graph.nodes if n.meta["op"] == "aten.addmm.default")
        flops = 2 * batch * width * width
        moved = 4 * (width + batch * width + width * width + batch * width)  # bias, input, weight, output
        expected = max(flops / profile.peak(torch.float32), moved / profile.bytes_per_s) + profile.launch_s
        assert first.cost == pytest.approx(expected)
        assert graph.cost_unit == f"seconds (flops, {device})"
    assert DEVICE_PROFILES["h100"].peak(torch.bfloat16) > DEVICE_PROFILES["h100"].peak(torch.float32)


def test_roofline_counts_attention_and_convolutions():
    model, inputs, loss_fn = _made("resnet")
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    launch = DEVICE_PROFILES["cpu"].launch_s
    convs = [n for n in graph.nodes if n.meta["op"].startswith("aten.convolution") and not n.meta["op"].endswith("]")]
    assert convs and all(n.cost > launch for n in convs)


def test_measured_costs_time_every_node_and_leave_the_model_alone():
    torch.manual_seed(0)
    model, inputs, loss_fn = MODELS["resnet"](batch_size=2, image=8)
    buffers = [b.clone() for b in model.buffers()]
    rng = torch.get_rng_state()
    graph = export_graph(model, inputs, loss_fn=loss_fn, cost_model="measured")
    assert graph.cost_unit == "seconds (measured, cpu)"
    taken_out = [n for n in graph.nodes if n.meta["op"].endswith("]")]  # an output of a multi-output op
    workspaces = [n for n in graph.nodes if "workspace_of" in n.meta]  # allocated by its op's kernel
    assert taken_out and workspaces and all(n.cost == 0 for n in taken_out + workspaces)
    assert graph.nodes[-1].id == STEP_END and graph.nodes[-1].cost == 0  # marks the end: runs nothing
    assert all(math.isfinite(n.cost) and n.cost > 0 for n in graph.nodes[:-1] if n not in taken_out + workspaces)
    assert all(torch.equal(a, b) for a, b in zip(buffers, model.buffers(), strict=True))
    assert torch.equal(rng, torch.get_rng_state())


def test_unknown_cost_models_and_devices_are_named():
    model, inputs, loss_fn = _made("mlp")
    joint, _ = capture(model, inputs, loss_fn=loss_fn)
    with pytest.raises(InvalidRequest, match="flops, measured"):
        node_costs(joint, [], cost_model="guess")
    with pytest.raises(InvalidRequest, match="Unknown device profile 'tpu'"):
        node_costs(joint, [], device="tpu")
    assert set(COST_MODELS) == {"flops", "measured"}


def test_live_bytes_counts_new_storages_after_each_op():
    x = torch.randn(1024)
    with LiveBytes() as live:
        a = x * 2                   # +4 KiB
        b = a.view(32, 32)          # a view: nothing new
        kept = a + 1                # +4 KiB: 8 KiB
        del a, b
        c = kept * 3                # -4 KiB (a), +4 KiB
    assert live.timeline == [4096, 4096, 8192, 8192]
    assert live.peak == 8192 and live.current == 8192
    assert c.shape == (1024,)


def test_activation_peak_counts_what_the_step_allocates_gradients_included():
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    peak = activation_peak(lambda: torch.tanh(lin(x)).sum().backward(), lin.parameters())
    activation = 32 * 64 * 4
    # the backward's largest moment holds the gradient of addmm's output and both parameter gradients
    # (tanh's output has gone), besides the loss and its gradient (4 bytes each)
    assert peak == activation + 64 * 64 * 4 + 64 * 4 + 8
    assert lin.weight.grad is not None


def test_the_allocator_counts_what_kernels_allocate_inside_their_ops():
    x = torch.randn(1024)
    step = lambda: (x * x) + x  # noqa: E731 - a 4 KiB temporary, then a 4 KiB result: both at once
    assert allocator_peak(step) == 8192
    images, weight = torch.randn(4, 8, 16, 16), torch.randn(8, 8, 3, 3, requires_grad=True)

    def convolve() -> None:
        torch.nn.functional.conv2d(images, weight, padding=1).sum().backward()

    weight.grad = None
    with LiveBytes() as live:
        convolve()
    weight.grad = None
    assert allocator_peak(convolve) > live.peak  # the convolution's backward takes a workspace no mode sees


def test_a_kernels_workspace_is_a_node_its_op_reads_and_small_ones_are_fixed_memory():
    model, inputs, loss_fn = MODELS["resnet"](batch_size=4)
    joint, graph = capture(model, inputs, loss_fn=loss_fn)
    nodes = {n.id: n for n in graph.nodes}
    workspaces = [p for p in joint.producers if p.workspace_of]
    assert {nodes[p.workspace_of].meta["op"] for p in workspaces} >= {"aten.convolution_backward.default"}
    for p in workspaces:
        ws, op = graph.index[p.name], graph.index[p.workspace_of]
        assert ws == op - 1 and ws in graph.nodes[op].deps and nodes[p.name].cost == 0
        # it reads what its op reads, so a plan makes it once they are resident: right before the op, not before
        # what the op's stage computes again
        assert set(graph.nodes[ws].deps) == set(graph.nodes[op].deps) - {ws}
        assert p.memory >= WORKSPACE_NODE_BYTES and nodes[p.name].meta["workspace_of"] == p.workspace_of
    assert 0 < joint.fixed["small_workspaces"] < WORKSPACE_NODE_BYTES  # batch norm's per-channel scratch


def test_a_graph_captured_again_keeps_the_workspaces_measured_first(monkeypatch):
    # On CUDA a kernel's workspace varies from one measure to the next; the same step captured again in the process
    # must hash the same, or the plan made for it (DDP's step alone, a cached plan, result=) is refused.
    model, inputs, loss_fn = MODELS["resnet"](batch_size=4)
    _, first = capture(model, inputs, loss_fn=loss_fn)
    measured = []
    monkeypatch.setattr(workspace, "allocation_peaks", lambda calls, device: measured.append(calls) or [])
    _, again = capture(model, inputs, loss_fn=loss_fn)
    assert again.sha256 == first.sha256 and not measured and any("workspace_of" in n.meta for n in again.nodes)


def test_attentions_random_seed_is_made_on_the_host_to_measure_its_backward():
    # A trace places the seed and offset of attention with dropout on the step's device; outside CUDA graph capture
    # the kernels read them on the host, so the backward's measure crashed the process (GPT-2 on an H200). Traced
    # here on the meta device, which runs nothing.
    q = torch.empty(2, 4, 16, 8, device="meta")
    scalar = torch.empty((), dtype=torch.long, device="meta")
    args = {"grad_out_": q, "query": q, "key": q, "value": q, "attn_bias": None, "out": q,
            "logsumexp": torch.empty(2, 4, 16, device="meta"), "philox_seed": scalar, "philox_offset": scalar}
    graph = torch.fx.Graph()
    nodes = []
    for name, val in args.items():
        if val is None:
            nodes.append(None)
            continue
        nodes.append(graph.placeholder(name))
        nodes[-1].meta["val"] = val
    run = _OpRun(graph.call_function(torch.ops.aten._scaled_dot_product_efficient_attention_backward.default,
                                     (*nodes, 0.1, [True, True, True, False], False)))
    run.make()
    assert run.inputs is not None
    made = dict(zip(args, run.inputs[0], strict=False))
    assert made["philox_seed"].device.type == made["philox_offset"].device.type == "cpu"
    assert made["query"].device.type == "meta" and made["logsumexp"].shape == (2, 4, 16)


def test_under_a_running_profiler_the_capture_goes_on_without_workspaces_and_says_so():
    model, inputs, loss_fn = MODELS["resnet"](batch_size=4)
    with torch.profiler.profile(), pytest.warns(UserWarning, match="profiler, which is running"):
        joint, _ = capture(model, inputs, loss_fn=loss_fn)
    assert not any(p.workspace_of for p in joint.producers) and joint.fixed["small_workspaces"] == 0


def test_time_call_reports_a_median_of_the_runs():
    calls = []
    t = time_call(lambda: calls.append(1), device=torch.device("cpu"), repeats=5, warmup=2)
    assert len(calls) == 7 and t.runs == 5
    assert 0 <= t.q1_s <= t.median_s <= t.q3_s


def test_public_surface_is_sorted_and_documented():
    names = list(client.__all__)
    key = [(0 if n.isupper() else 1 if n[0].isupper() else 2, n) for n in names]
    assert key == sorted(key)
    assert all(hasattr(client, n) for n in names)
    for info in pkgutil.walk_packages(client.__path__, prefix="remat.clients.torch."):
        module = importlib.import_module(info.name)
        failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert failures == 0, info.name


@pytest.mark.parametrize(("gpu", "profile"), [("NVIDIA H200", "h200"), ("NVIDIA GH200 480GB", "h200"),
                                              ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"),
                                              ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA L4", "a100")])
def test_a_gpu_is_costed_by_its_own_profile(monkeypatch, gpu, profile):
    from remat.clients.torch import _costs

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu)
    on_gpu = torch.empty(0, device="meta")
    monkeypatch.setattr(_costs, "_cuda_devices", lambda args: [on_gpu.device])
    assert _costs._default_profile([on_gpu]) == profile
