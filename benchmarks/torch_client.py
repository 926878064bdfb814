"""remat against what PyTorch users have, on the models they train, side by side in one run.

Per model: the eager step as people write it; the framework's own checkpointing (transformers'
``activation_checkpointing_enable``, every layer or every other, diffusers' ``enable_gradient_checkpointing``, or
``torch.utils.checkpoint`` per block or stage where the model has none); torch's selective
activation checkpointing saving every matmul (through the framework's checkpointing); torch.compile
(Inductor) with ``activation_memory_budget`` swept; and ``rematerialize()`` with eager kernels and
with Inductor, asked with the bytes each of those reaches and nothing else (the loop unchanged), and
at 0.5 and 0.3 of the eager peak. Each row gives the step's peak (bytes it allocates above its
parameters, buffers and inputs: activations and gradients, what ``max_memory_allocated()`` less the
memory before the step reads) and the step time as a ratio to eager. A second table gives the wall time of
capture, plan and first step: ``rematerialize()`` with an empty plan cache and with a full one,
against ``torch.compile(backend="aot_eager")``, which captures the same graph and plans nothing.

The peak is the allocator's, above what it held before the step, for every variant alike: on the CPU
read through the profiler's allocation events (:func:`remat.clients.torch.allocator_peak`), which
count what kernels allocate and free inside an op (a convolution's columns, oneDNN's reorders) as
well as the tensors; on CUDA from the caching allocator. On the CPU the same step is also counted by
a dispatcher mode (:class:`remat.clients.torch.LiveBytes`, which sees tensors only), in its own
column. Times are medians over rounds that run every variant once, in turn: CUDA events on a GPU; on
the CPU, torch runs one intra-op thread and a step is timed by the CPU time of the process, which
the load of other processes on a shared machine does not inflate (the wall clock does, by several
times). glibc hands large freed blocks back to the kernel and page-faults them in again at the next
allocation, a cost that grows with how often a step frees and allocates (PyTorch's CUDA allocator
caches blocks instead); the script restarts itself with glibc's trim and mmap thresholds raised, so
that the CPU heap keeps freed memory for every variant alike. Logging inside a traced model is
skipped for every compiled variant alike (transformers' models log from their loss, which would
otherwise break torch.compile's graph).

    python benchmarks/torch_client.py                              # the library models (long: compiles)
    python benchmarks/torch_client.py --models gpt2 --rounds 3     # one model
    python benchmarks/torch_client.py --models vit --compilers eager --compile-budgets ''   # remat's eager kernels
    python benchmarks/torch_client.py --models mlp,resnet,unet,gpt,lstm   # the test models
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from torch_models import MODELS as TEST_MODELS  # noqa: E402

from remat.clients.torch import (  # noqa: E402
    PlanCache,
    activation_peak,
    allocator_peak,
    capture,
    rematerialize,
    time_call,
)
from remat.clients.torch._capture import tracing  # noqa: E402
from remat.schedules import RematError, format_size  # noqa: E402

#: glibc settings under which the CPU heap caches freed blocks (see the module docstring).
HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**30)}

#: Sizes of the test models at which activations dominate the step's memory on a CPU.
TEST_SIZES: dict[str, dict[str, int]] = {
    "mlp": {"batch_size": 1024, "width": 512, "depth": 12},
    "resnet": {"batch_size": 16, "width": 16, "blocks": 2, "image": 32},
    "unet": {"batch_size": 4, "width": 16, "levels": 3, "image": 64},
    "gpt": {"batch_size": 8, "vocab": 512, "context": 128, "dim": 128, "heads": 4, "layers": 4},
    "lstm": {"batch_size": 64, "steps": 24, "features": 64, "hidden": 256},
}


@dataclass
class Workload:
    """A model as it comes, one batch, the training step people write, and the checkpointing it offers."""

    name: str
    sizes: str
    make: Callable[[], nn.Module]
    inputs: Any
    loss: Callable[[nn.Module], torch.Tensor]
    """The step up to its loss, as the user writes it, on this workload's batch."""
    checkpointing: dict[str, Callable[[nn.Module], None]]
    """The framework's own checkpointing options: a label and how to turn it on."""


@dataclass
class Variant:
    """One way of running a workload's training step."""

    name: str
    model: nn.Module
    step: Callable[[], Any]
    note: str = ""
    plan: int | None = None
    """remat's planned peak (bytes above resident memory), to set the measured one beside."""
    peak: int = 0
    """The step's peak by the allocator's count, workspaces included."""
    tensors: int | None = None
    """The same step's peak by a dispatcher mode's count (tensors only; on the CPU)."""
    times: list[float] = field(default_factory=list)

    def run(self) -> None:
        for p in self.model.parameters():
            p.grad = None
        self.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt2,llama,bert,sd-unet",
                        help=f"comma-separated, of {', '.join([*LIBRARY, *TEST_SIZES])}")
    parser.add_argument("--budgets", default="0.5,0.3", help="remat budgets, fractions of the eager step peak")
    parser.add_argument("--compilers", default="eager,inductor", help="remat's compilers to run ('eager', 'inductor')")
    parser.add_argument("--compile-budgets", default="1.0,0.5,0.3",
                        help="values of activation_memory_budget for torch.compile ('' to skip)")
    parser.add_argument("--cost-model", default="measured", help="remat's cost model: measured or flops")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (each runs every variant once)")
    parser.add_argument("--no-first-step", action="store_true",
                        help="skip the table of capture, plan and first-step wall times")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        if any(os.environ.get(k) != v for k, v in HEAP_ENV.items()):
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **HEAP_ENV})
        torch.set_num_threads(1)
    print(_header(device))
    for name in args.models.split(","):
        _benchmark(_workload(name, device), device, args)


# -- workloads ----------------------------------------------------------------------------------------


def _sac(model_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``model_fn`` with torch's selective activation checkpointing context: every matmul's output is saved."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    matmuls = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
               torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
               torch.ops.aten._scaled_dot_product_efficient_attention.default,
               torch.ops.aten._scaled_dot_product_flash_attention.default, torch.ops.aten.convolution.default}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if op in matmuls else CheckpointPolicy.PREFER_RECOMPUTE

    return model_fn(functools.partial(create_selective_checkpoint_contexts, policy))


def _text(name: str, device: torch.device) -> Workload:
    import transformers

    transformers.logging.set_verbosity_error()
    vocab, batch, length = 2048, 4, 256  # the loss over the vocabulary about 6 % of the memory, as in GPT-2 small
    if name == "gpt2":
        config: Any = transformers.GPT2Config(n_layer=6, n_embd=256, n_head=8, vocab_size=vocab, n_positions=length)
        cls: Any = transformers.GPT2LMHeadModel
    elif name == "llama":
        config = transformers.LlamaConfig(num_hidden_layers=6, hidden_size=256, intermediate_size=688,
                                          num_attention_heads=8, num_key_value_heads=4, vocab_size=vocab)
        cls = transformers.LlamaForCausalLM
    else:
        config = transformers.BertConfig(num_hidden_layers=6, hidden_size=256, intermediate_size=1024,
                                         num_attention_heads=8, vocab_size=vocab)
        cls = transformers.BertForMaskedLM
    ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1:, length * 3 // 4:] = 0
    inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": ids.to(device)}

    return Workload(
        name, f"{config.num_hidden_layers} layers, width {config.hidden_size}, vocab {vocab}, "
              f"batch {batch} x {length} tokens, SDPA, padding mask, default cache setting",
        lambda: cls(config).to(device).train(), inputs, lambda m: m(**inputs).loss, _hf_checkpointing())


def _sd_unet(device: torch.device) -> Workload:
    import diffusers
    from torch.utils.checkpoint import checkpoint

    def make() -> nn.Module:
        return diffusers.UNet2DConditionModel(
            sample_size=32, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(64, 128, 128),
            norm_num_groups=16, cross_attention_dim=128, attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")).to(device).train()

    g = torch.Generator().manual_seed(0)
    latents, noise = (torch.randn(4, 4, 32, 32, generator=g).to(device) for _ in range(2))
    text, steps = torch.randn(4, 16, 128, generator=g).to(device), torch.tensor([10, 200, 500, 900], device=device)

    def sac(context: Any) -> Callable[[nn.Module], None]:
        return lambda m: m.enable_gradient_checkpointing(
            gradient_checkpointing_func=functools.partial(checkpoint, use_reentrant=False, context_fn=context))

    return Workload(
        "sd-unet", "UNet2DConditionModel, channels (64, 128, 128), 1 layer per block, batch 4 x 4 x 32 x 32, "
                   "text 16 x 128", make, (latents, steps, text),
        lambda m: F.mse_loss(m(latents, steps, text).sample, noise),
        {"enable_gradient_checkpointing()": lambda m: m.enable_gradient_checkpointing(),
         "selective checkpointing (save matmuls)": _sac(sac)})


def _t5(device: torch.device) -> Workload:
    import transformers

    transformers.logging.set_verbosity_error()
    vocab, batch, length = 2048, 4, 128
    config = transformers.T5Config(num_layers=4, num_decoder_layers=4, d_model=256, d_ff=1024, num_heads=8,
                                   d_kv=32, vocab_size=vocab, decoder_start_token_id=0)
    g = torch.Generator().manual_seed(0)
    inputs = {"input_ids": torch.randint(0, vocab, (batch, length), generator=g).to(device),
              "labels": torch.randint(0, vocab, (batch, length // 2), generator=g).to(device)}
    return Workload(
        "t5", f"4 + 4 layers, width 256, vocab {vocab}, batch {batch} x {length} tokens in, {length // 2} out",
        lambda: transformers.T5ForConditionalGeneration(config).to(device).train(), inputs,
        lambda m: m(**inputs).loss, _hf_checkpointing())


def _vision(name: str, device: torch.device) -> Workload:
    import transformers

    transformers.logging.set_verbosity_error()
    g = torch.Generator().manual_seed(0)
    if name == "vit":
        config: Any = transformers.ViTConfig(image_size=64, patch_size=8, hidden_size=256, num_hidden_layers=6,
                                             num_attention_heads=8, intermediate_size=1024, num_labels=10)
        cls: Any = transformers.ViTForImageClassification
        sizes = "6 layers, width 256, 64 x 64 images in 8 x 8 patches, batch 16"
        checkpointing = _hf_checkpointing()
    else:
        config = transformers.ConvNextConfig(num_channels=3, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 4, 2],
                                             num_labels=10, image_size=64)
        cls = transformers.ConvNextForImageClassification
        sizes = "stages (32, 64, 128, 256) x (2, 2, 4, 2), 64 x 64 images, batch 16"
        checkpointing = {"torch.utils.checkpoint per stage": _checkpoint_stages}
    inputs = {"pixel_values": torch.randn(16, 3, 64, 64, generator=g).to(device),
              "labels": torch.randint(0, 10, (16,), generator=g).to(device)}
    return Workload(name, sizes, lambda: cls(config).to(device).train(), inputs, lambda m: m(**inputs).loss,
                    checkpointing)


def _checkpoint_stages(model: nn.Module) -> None:
    """ConvNeXt has no checkpointing of its own in transformers: each stage under ``torch.utils.checkpoint``."""
    from torch.utils.checkpoint import checkpoint

    for stage in model.convnext.encoder.stages:
        stage.forward = functools.partial(checkpoint, stage.forward, use_reentrant=False)


def _dit(device: torch.device) -> Workload:
    import diffusers

    g = torch.Generator().manual_seed(0)
    latents, noise = (torch.randn(8, 4, 32, 32, generator=g).to(device) for _ in range(2))
    steps, labels = torch.tensor([10, 200, 500, 900] * 2, device=device), torch.randint(0, 10, (8,), generator=g)

    def make() -> nn.Module:
        return diffusers.DiTTransformer2DModel(num_attention_heads=4, attention_head_dim=32, in_channels=4,
                                              num_layers=6, sample_size=32, patch_size=2, num_embeds_ada_norm=10,
                                              norm_num_groups=32).to(device).train()

    labels = labels.to(device)

    def loss(m: nn.Module) -> torch.Tensor:
        return F.mse_loss(m(latents, steps, labels).sample, noise)

    return Workload("dit", "DiTTransformer2DModel, 6 layers, width 128, 32 x 32 latents in 2 x 2 patches, batch 8",
                    make, (latents, steps, labels), loss,
                    {"enable_gradient_checkpointing()": lambda m: m.enable_gradient_checkpointing()})


def _hf_checkpointing() -> dict[str, Callable[[nn.Module], None]]:
    """transformers' checkpointing, every layer and every other, and selective checkpointing through it."""

    def enable(every: int = 1, **kwargs: Any) -> Callable[[nn.Module], None]:
        return lambda m: m.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False, **kwargs}, every_n_layers=every)

    return {"activation_checkpointing_enable()": enable(),
            "activation_checkpointing_enable(every_n_layers=2)": enable(2),
            "selective checkpointing (save matmuls)": _sac(lambda context: enable(context_fn=context))}


def _test_model(name: str, device: torch.device) -> Workload:
    torch.manual_seed(0)
    model, inputs, loss_fn = TEST_MODELS[name](**TEST_SIZES[name])
    inputs = tuple(x.to(device) for x in inputs)

    def make() -> nn.Module:
        return copy.deepcopy(model).to(device)

    def every(k: int) -> Callable[[nn.Module], None]:
        return lambda m: setattr(m, "checkpoint_every", k)

    # the model takes the batch's first tensor; its loss against the targets is computed outside
    return Workload(name, ", ".join(f"{k}={v}" for k, v in TEST_SIZES[name].items()), make, inputs[:1],
                    lambda m: loss_fn(m, *inputs), {"torch.utils.checkpoint per block": every(1)})


LIBRARY: dict[str, Callable[[torch.device], Workload]] = {
    "gpt2": functools.partial(_text, "gpt2"), "llama": functools.partial(_text, "llama"),
    "bert": functools.partial(_text, "bert"), "t5": _t5, "vit": functools.partial(_vision, "vit"),
    "convnext": functools.partial(_vision, "convnext"), "sd-unet": _sd_unet, "dit": _dit,
}


def _workload(name: str, device: torch.device) -> Workload:
    if name in LIBRARY:
        return LIBRARY[name](device)
    return _test_model(name, device)


# -- variants -----------------------------------------------------------------------------------------


def _benchmark(work: Workload, device: torch.device, args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    base = work.make()
    eager = _variant("eager", base, work)
    variants = [eager]
    for label, enable in work.checkpointing.items():
        variant = _variant(label, base, work)
        enable(variant.model)
        variants.append(variant)
    for budget in [float(b) for b in args.compile_budgets.split(",") if b]:
        variants.append(_compiled(base, work, budget))
    for variant in variants:
        _warm_up(variant)
        _measure_peak(variant)

    targets = {f"{r:g} of eager": r * eager.peak for r in [float(b) for b in args.budgets.split(",") if b]}
    targets.update({f"as {v.name}": v.peak for v in variants[1:]})
    refused: list[str] = []
    for label, peak in targets.items():
        for compiler in args.compilers.split(","):
            variant = _remat(base, work, label, int(peak), compiler, args)
            if isinstance(variant, str):
                refused.append(variant)
                continue
            _warm_up(variant)
            _measure_peak(variant)
            variants.append(variant)
    for _ in range(args.rounds):
        for variant in variants:
            variant.times.append(time_call(variant.run, device=device, repeats=1, warmup=0, cpu_time=True).median_s)
    _table(work, variants, eager, refused)
    if not args.no_first_step:
        _first_step_table(work, args)


def _variant(label: str, base: nn.Module, work: Workload) -> Variant:
    model = copy.deepcopy(base)
    return Variant(label, model, lambda: work.loss(model).backward())


def _compiled(base: nn.Module, work: Workload, budget: float) -> Variant:
    """torch.compile (Inductor) of the model, compiled under ``activation_memory_budget`` with its caches off.

    The model's class is a subclass of its own: TorchDynamo keeps compiled code per code object (every module's
    ``__call__``) behind guards that a copy of the model of the same class passes, so the variants of a sweep
    would all run the graphs compiled under the first budget (they measured the same peak at 1, 0.5 and 0.3)."""
    model = copy.deepcopy(base)
    model.__class__ = type(type(model).__name__, (type(model),), {})
    compiled = torch.compile(model, fullgraph=True, dynamic=False)

    def step() -> None:
        with functorch_config.patch(activation_memory_budget=budget, enable_autograd_cache=False), \
                inductor_config.patch(fx_graph_cache=False), tracing():
            work.loss(compiled).backward()

    return Variant(f"torch.compile, activation_memory_budget={budget:g}", model, step)


def _remat(base: nn.Module, work: Workload, label: str, peak: int, compiler: str,
           args: argparse.Namespace) -> Variant | str:
    """rematerialize() with ``peak`` activation bytes on top of what the step holds anyway; or why not."""
    model = copy.deepcopy(base)
    budget = capture(model, work.inputs)[0].resident_memory + peak
    name = f"remat ({compiler}), {label}"
    started = time.perf_counter()
    try:
        rm = rematerialize(model, work.inputs, budget=budget, cost_model=args.cost_model, compiler=compiler,
                           cache=False, progress=False)
    except RematError as e:  # no plan within the budget, or one this compiler cannot run
        return f"| {name} | no plan | | | | | | | {str(e)[:240]} |"
    planned = rm.plans[0]
    plan_peak = planned.simulation.peak_memory - planned.joint.resident_memory
    note = (f"{planned.graph.size} nodes, {planned.result.strategy} {planned.result.status.value}, simulated "
            f"{planned.result.overhead:.3f}x compute, plan peak {format_size(plan_peak)}, "
            f"planned in {time.perf_counter() - started:.1f} s")
    return Variant(name, model, lambda: work.loss(rm).backward(), note, plan=int(plan_peak))


def _warm_up(variant: Variant) -> None:
    for _ in range(2):
        variant.run()


def _measure_peak(variant: Variant) -> None:
    """The step's peak by the allocator and, on the CPU, by a dispatcher mode in the same step."""
    for p in variant.model.parameters():
        p.grad = None
    params = list(variant.model.parameters())
    if params[0].device.type == "cuda":  # activation_peak reads the caching allocator there
        variant.peak = activation_peak(variant.step, params)
        return
    seen: list[int] = []
    variant.peak = allocator_peak(lambda: seen.append(activation_peak(variant.step, params)))
    variant.tensors = seen[0]


# -- capture, plan and first step -----------------------------------------------------------------------


def _first_step_table(work: Workload, args: argparse.Namespace) -> None:
    """Wall time of capture, plan and first step: aot_eager, remat with an empty cache, remat from the cache."""
    cache = PlanCache(tempfile.mkdtemp(prefix="remat-bench-"))

    def timed(make_step: Callable[[nn.Module], nn.Module]) -> tuple[float, Any]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = work.make()
        started = time.perf_counter()
        stepper = make_step(model)
        with tracing():
            work.loss(stepper).backward()
        return time.perf_counter() - started, stepper

    rows = []
    for _ in range(2):  # the first round also pays one-time imports; the second is reported
        aot, _ = timed(lambda m: torch.compile(m, backend="aot_eager", fullgraph=True, dynamic=False))
        for entry in cache.directory.glob("*.json"):
            entry.unlink()
        first, rm = timed(lambda m: rematerialize(m, work.inputs, activation_budget=0.5, cache=cache, progress=False))
        again, rm2 = timed(lambda m: rematerialize(m, work.inputs, activation_budget=0.5, cache=cache, progress=False))
        rows = [aot, first, again, rm, rm2]
    aot, first, again, rm, rm2 = rows
    print(f"\nCapture, plan and first step of {work.name} ({rm.graph.size} nodes; activation_budget=0.5, default "
          f"cost model and solver settings):\n")
    print("| | wall time (s) | more than aot_eager (s) | plan |")
    print("|---|---|---|---|")
    print(f"| torch.compile(backend=\"aot_eager\") | {aot:.1f} | | none |")
    print(f"| rematerialize(), empty plan cache | {first:.1f} | {first - aot:+.1f} | {rm.plans[0].source}, "
          f"{rm.result.status.value} in {rm.result.solve_time_s:.1f} s, {rm.result.overhead:.3f}x compute |")
    print(f"| rematerialize(), from the plan cache | {again:.1f} | {again - aot:+.1f} | {rm2.plans[0].source} |")
    sys.stdout.flush()


# -- reporting -----------------------------------------------------------------------------------------


def _table(work: Workload, variants: list[Variant], eager: Variant, refused: list[str]) -> None:
    base_time = statistics.median(eager.times)
    print(f"\n### {work.name} ({work.sizes})\n")
    print("| variant | step peak (allocator) | tensors only (LiveBytes) | peak / eager | measured / plan | "
          "step time (ms) | time / eager | notes |")
    print("|---|---|---|---|---|---|---|---|")
    for v in variants:
        t = statistics.median(v.times)
        ratio = f"{v.peak / v.plan:.4f} ({v.peak - v.plan:+,} B)" if v.plan else ""
        tensors = format_size(v.tensors) if v.tensors is not None else ""
        print(f"| {v.name} | {format_size(v.peak)} | {tensors} | {v.peak / eager.peak:.3f} | {ratio} | "
              f"{1e3 * t:.1f} | {t / base_time:.3f} | {v.note} |")
    for row in refused:
        print(row)
    print()
    others = [v for v in variants[1:] if not v.name.startswith("remat")]
    for target in others:
        fits = [v for v in variants if v.name.startswith("remat") and v.peak <= target.peak]
        print(f"- At the memory of {target.name} ({target.peak / eager.peak:.3f} of eager, "
              f"{statistics.median(target.times) / base_time:.3f} of its time): {_best(fits, base_time)}.")
    for r in (0.5, 0.3):
        fits = [v for v in variants[1:] if v.peak <= r * eager.peak]
        print(f"- At {r:g} of the eager peak: fastest that fits: {_best(fits, base_time)}.")
    sys.stdout.flush()


def _best(variants: list[Variant], base_time: float) -> str:
    if not variants:
        return "none fits"
    v = min(variants, key=lambda v: statistics.median(v.times))
    return f"{v.name} ({statistics.median(v.times) / base_time:.3f} of eager's time)"


def _header(device: torch.device) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()} CPUs, {_cpu_model()}"
    return (f"Machine: {where}; torch {torch.__version__}, Python {platform.python_version()}; "
            f"date {time.strftime('%Y-%m-%d %H:%M %Z')}; load average {os.getloadavg()[0]:.1f}; "
            f"{torch.get_num_threads()} intra-op threads.")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
