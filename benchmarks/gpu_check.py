"""What only a GPU can check, in one run of a few minutes: run it first whenever a CUDA device is lent.

On two models as they come (transformers' GPT-2 with its loss, diffusers' UNet with an MSE loss
computed outside), one batch each, the training loop as people write it:

- the step's peak as the CUDA allocator reports it (``max_memory_allocated`` less the memory before
  the step) against the plan's, for remat with eager kernels and with Inductor (Triton), asked with
  the bytes the framework's own checkpointing takes and nothing else, and with a plan that recomputes
  nothing (what running a planned graph costs in time and holds beyond the plan, apart from the plan's
  choices: an Inductor row over its plan there is Inductor's own, not the recomputations');
- step times from CUDA events (median of the timed steps) against eager, the framework's checkpointing
  and ``torch.compile``, and each plan's compute as its cost model costs it (an offloading plan weighs its
  copies against that, so it should be near eager's measured time);
- a plan that offloads to pinned host memory over copy streams (``transfer="auto"``), run once with
  ``REMAT_CHECK_COPIES=1`` (every reloaded value checked against the value offloaded: a stream race
  raises) and then timed; its gradients against eager's.

Prints one table per model and the wall time; record the run in benchmarks/LOG.md and its tables in
benchmarks/README.md (replacing the previous run's), with the card and the date.

    python benchmarks/gpu_check.py                         # on the CUDA device (under 8 minutes)
    python benchmarks/gpu_check.py --device cpu --small    # the same checks on the CPU, small models
    python benchmarks/gpu_check.py --profile               # GPT-2's kernels: eager against a planned graph

``--profile`` runs only GPT-2: a few steps of eager, of ``torch.compile(backend="aot_eager")`` (the traced
graph run op for op, the fair reference for a planned one) and of remat with eager kernels and a plan that
recomputes nothing, each under torch.profiler, and prints their step times, kernels per step and the top
20 kernels (on the CPU, aten ops) with their counts and times side by side (under a minute on a GPU).
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from remat.clients.torch import rematerialize
from remat.clients.torch._capture import tracing
from remat.clients.torch._offload import CHECK_COPIES
from remat.schedules import RematError, format_size


@dataclass
class Model:
    """A model as it comes, its batch, the step people write and the framework's checkpointing."""

    name: str
    make: Callable[[], nn.Module]
    inputs: Any
    loss: Callable[[nn.Module], torch.Tensor]
    checkpointing: Callable[[nn.Module], None]


@dataclass
class Row:
    name: str
    peak: int
    times: list[float]
    plan: int | None = None
    note: str = ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="small models (for a run on the CPU)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant")
    parser.add_argument("--profile", action="store_true", help="GPT-2's kernels: eager, aot_eager and a plan")
    parser.add_argument("--models", nargs="+", choices=("gpt2", "unet"), default=["gpt2", "unet"],
                        help="the models to check (both by default)")
    args = parser.parse_args()
    device = torch.device(args.device)
    started = time.perf_counter()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{where}; torch {torch.__version__}, CUDA {torch.version.cuda}; {time.strftime('%Y-%m-%d %H:%M %Z')}")
    if args.profile:
        _profile(_gpt2(device, args.small), device)
    else:
        for make in args.models:
            _check({"gpt2": _gpt2, "unet": _unet}[make](device, args.small), device, args.steps)
    print(f"\nWall time {time.perf_counter() - started:.0f} s.")


def _gpt2(device: torch.device, small: bool) -> Model:
    import transformers

    transformers.logging.set_verbosity_error()
    layers, width, batch, length = (2, 64, 2, 64) if small else (12, 768, 8, 1024)
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64), n_positions=length,
                                     vocab_size=50257 if not small else 1000)
    ids = torch.randint(0, config.vocab_size, (batch, length), device=device)
    batch_dict = {"input_ids": ids, "labels": ids}
    return Model(f"GPT-2, {layers} layers, width {width}, {batch} x {length} tokens",
                 lambda: transformers.GPT2LMHeadModel(config).to(device).train(), batch_dict,
                 lambda m: m(**batch_dict).loss, lambda m: m.gradient_checkpointing_enable({"use_reentrant": False}))


def _unet(device: torch.device, small: bool) -> Model:
    import diffusers

    channels, batch, size = ((16, 32), 2, 16) if small else ((128, 256, 512), 16, 64)
    blocks = len(channels)

    def make() -> nn.Module:
        return diffusers.UNet2DConditionModel(
            sample_size=size, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=channels,
            norm_num_groups=8 if small else 32, cross_attention_dim=64 if small else 768, attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D",) * (blocks - 1) + ("DownBlock2D",),
            up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (blocks - 1)).to(device).train()

    latents, noise = (torch.randn(batch, 4, size, size, device=device) for _ in range(2))
    text = torch.randn(batch, 77, 64 if small else 768, device=device)
    steps = torch.randint(0, 1000, (batch,), device=device)
    return Model(f"diffusers UNet, channels {channels}, {batch} x 4 x {size} x {size}", make, (latents, steps, text),
                 lambda m: F.mse_loss(m(latents, steps, text).sample, noise),
                 lambda m: m.enable_gradient_checkpointing())


def _check(model: Model, device: torch.device, steps: int) -> None:
    """Each variant's row printed as soon as it is measured; one that fails says why and the others still run."""
    torch.manual_seed(0)
    base = model.make()
    resident = _resident(base, model.inputs)
    table = _Table(model.name)
    eager = table.add("eager", lambda: _run("eager", copy.deepcopy(base), model, device, steps))
    checkpointed = copy.deepcopy(base)
    model.checkpointing(checkpointed)
    framework = table.add("framework checkpointing", lambda: _run("framework checkpointing", checkpointed, model,
                                                                    device, steps))
    table.add("torch.compile", lambda: _run("torch.compile", copy.deepcopy(base), model, device, steps,
                                            wrap=lambda m: torch.compile(m)))
    if eager is None or framework is None:
        return
    for compiler in ("eager", "inductor"):
        name = f"remat ({compiler}), nothing recomputed"  # what running a plan costs, apart from the plan's choices
        table.add(name, functools.partial(_remat, name, base, model, device, steps, activation_budget=1.0,
                                          strategy="checkpoint-all", compiler=compiler))
        name = f"remat ({compiler}) at the checkpointing's bytes"
        table.add(name, functools.partial(_remat, name, base, model, device, steps,
                                          budget=resident + framework.peak, compiler=compiler))
    table.add("remat (eager) offloading, at 0.5 of eager's bytes", lambda: _offloaded(base, model, device, steps,
                                                             budget=resident + eager.peak // 2))


class _Table:
    """One model's table, printed a row at a time; times are relative to the first row's."""

    def __init__(self, name: str) -> None:
        self.eager: float | None = None
        print(f"\n### {name}\n")
        print("| variant | step peak | plan | measured / plan | step time (ms) | time / eager | notes |")
        print("|---|---|---|---|---|---|---|")
        sys.stdout.flush()

    def add(self, name: str, measure: Callable[[], Row]) -> Row | None:
        """Measure one variant and print its row; None (and the error in the row) if it failed."""
        try:
            r = measure()
        except Exception as e:  # a check that fails is a row that says so, and the run goes on
            print(f"| {name} | | | | | | failed: {type(e).__name__}: {str(e)[:300]} |")
            sys.stdout.flush()
            return None
        t = statistics.median(r.times) if r.times else float("nan")
        self.eager = self.eager or t
        plan = format_size(r.plan) if r.plan is not None else ""
        ratio = f"{r.peak / r.plan:.4f}" if r.plan else ""
        print(f"| {r.name} | {format_size(r.peak)} | {plan} | {ratio} | {1e3 * t:.1f} | {t / self.eager:.3f} "
              f"| {r.note} |")
        sys.stdout.flush()
        return r


def _run(name: str, m: nn.Module, model: Model, device: torch.device, steps: int,
         wrap: Callable[[nn.Module], nn.Module] | None = None, plan: int | None = None, note: str = "") -> Row:
    """Two warm-up steps, one measured for its peak, ``steps`` timed with CUDA events."""
    step = functools.partial(_step, model, m, wrap(m) if wrap is not None else m)
    for _ in range(2):
        step()
    m.zero_grad(set_to_none=True)
    _sync(device)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    peak = _peak(step, device) - before
    times = [_timed(step, device) for _ in range(steps)]
    return Row(name, peak, times, plan, note)


def _step(model: Model, m: nn.Module, stepper: nn.Module) -> None:
    """One training step of ``m`` called through ``stepper`` (itself, compiled or planned)."""
    m.zero_grad(set_to_none=True)
    with tracing():
        model.loss(stepper).backward()


def _remat(name: str, base: nn.Module, model: Model, device: torch.device, steps: int, **options: Any) -> Row:
    m = copy.deepcopy(base)
    try:
        rm = rematerialize(m, model.inputs, cache=False, progress=False, **options)
    except RematError as e:
        return Row(name, 0, [], note=f"no plan: {str(e)[:200]}")
    planned = rm.plans[0]
    plan = int(planned.simulation.peak_memory - planned.joint.resident_memory)
    note = (f"{planned.result.strategy} {planned.result.status.value}, {planned.result.overhead:.3f}x compute "
            f"of {1e3 * planned.graph.base_cost:.1f} ms costed")  # against eager's time: the cost model's scale
    return _run(name, m, model, device, steps, wrap=lambda _: rm, plan=plan, note=note)


def _offloaded(base: nn.Module, model: Model, device: torch.device, steps: int, *, budget: int) -> Row:
    """An offloading plan run once with every copy checked, its gradients against eager's, then timed."""
    name = "remat (eager) offloading, at 0.5 of eager's bytes"
    m, ref = copy.deepcopy(base), copy.deepcopy(base)
    try:
        rm = rematerialize(m, model.inputs, budget=budget, transfer="auto" if device.type == "cuda" else "pcie5-x16",
                           cache=False, progress=False)
    except RematError as e:
        return Row(name, 0, [], note=f"no plan: {str(e)[:200]}")
    os.environ[CHECK_COPIES] = "1"
    try:
        checked = copy.deepcopy(base)  # a step with checked copies, on a module planned under the check
        rm_checked = rematerialize(checked, model.inputs, budget=budget, result=rm.result, cache=False,
                                   progress=False, transfer="auto" if device.type == "cuda" else "pcie5-x16")
        with tracing():
            torch.manual_seed(1)
            model.loss(rm_checked).backward()
            torch.manual_seed(1)
            model.loss(ref).backward()
    finally:
        del os.environ[CHECK_COPIES]
    worst = max(float((p.grad - q.grad).abs().max()) for p, q in zip(checked.parameters(), ref.parameters(),
                                                                        strict=True))
    planned = rm.plans[0]
    plan = int(planned.simulation.peak_memory - planned.joint.resident_memory)
    note = (f"copies checked: clean; largest gradient difference from eager {worst:.2e}; "
            f"{format_size(planned.simulation.host_peak_memory)} on the host, "
            f"{planned.result.overhead:.3f}x the step's time (simulated) of {1e3 * planned.graph.base_cost:.1f} ms "
            f"costed")
    return _run(name, m, model, device, steps, wrap=lambda _: rm, plan=plan, note=note)


def _profile(model: Model, device: torch.device, steps: int = 3) -> None:
    """Each variant's kernels (on the CPU, aten ops) over ``steps`` profiled steps, side by side: the 20 that take the
    most time in any variant, with their launches per step and milliseconds per step."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    base = model.make()
    nets = {name: copy.deepcopy(base) for name in ("eager", "aot_eager", "remat, nothing recomputed")}
    steppers = {"eager": nets["eager"], "aot_eager": torch.compile(nets["aot_eager"], backend="aot_eager",
                                                                    fullgraph=True),
                "remat, nothing recomputed": rematerialize(nets["remat, nothing recomputed"], model.inputs,
                                                           activation_budget=1.0, strategy="checkpoint-all",
                                                           cache=False, progress=False)}
    kind = DeviceType.CUDA if device.type == "cuda" else DeviceType.CPU
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    per_kernel: dict[str, dict[str, tuple[int, float]]] = {}
    print(f"\n### {model.name}: kernels per step over {steps} profiled steps\n")
    print("| variant | step time (ms) | kernels per step | kernel time per step (ms) |\n|---|---|---|---|")
    for name, stepper in steppers.items():
        step = functools.partial(_step, model, nets[name], stepper)
        for _ in range(2):
            step()
        times = [_timed(step, device) for _ in range(steps)]
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            _sync(device)
        kernels = {e.key: (e.count, e.self_device_time_total if kind == DeviceType.CUDA else e.self_cpu_time_total)
                   for e in prof.key_averages() if e.device_type == kind and (kind == DeviceType.CUDA
                                                                               or e.key.startswith("aten::"))}
        per_kernel[name] = kernels
        print(f"| {name} | {1e3 * statistics.median(times):.1f} | {sum(c for c, _ in kernels.values()) / steps:.0f} "
              f"| {sum(t for _, t in kernels.values()) / steps / 1e3:.1f} |")
    top = sorted({k for kernels in per_kernel.values() for k in kernels},
                 key=lambda k: -max(kernels.get(k, (0, 0.0))[1] for kernels in per_kernel.values()))[:20]
    print("\n| kernel | " + " | ".join(f"{name}: per step, ms" for name in per_kernel) + " |")
    print("|---|" + "---|" * len(per_kernel))
    for k in top:
        cells = [per_kernel[name].get(k, (0, 0.0)) for name in per_kernel]
        print(f"| {k[:90]} | " + " | ".join(f"{c / steps:.0f}, {t / steps / 1e3:.2f}" for c, t in cells) + " |")
    sys.stdout.flush()


def _peak(step: Callable[[], None], device: torch.device) -> int:
    if device.type == "cuda":
        step()
        _sync(device)
        return int(torch.cuda.max_memory_allocated(device))
    from remat.clients.torch import LiveBytes

    with LiveBytes() as live:
        step()
    return live.peak


def _timed(step: Callable[[], None], device: torch.device) -> float:
    if device.type != "cuda":
        started = time.perf_counter()
        step()
        return time.perf_counter() - started
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _resident(model: nn.Module, inputs: Any) -> int:
    """Bytes of the parameters, buffers and inputs: what a step holds before it starts."""
    tensors = [*model.parameters(), *model.buffers(),
               *[t for t in (inputs.values() if isinstance(inputs, dict) else inputs) if isinstance(t, torch.Tensor)]]
    return sum(t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in tensors}.values())


if __name__ == "__main__":
    main()
