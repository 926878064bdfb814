"""remat against torch.utils.checkpoint and torch.compile's activation budget, on five real models.

Per model, side by side in one run: the unpatched step; torch.utils.checkpoint over groups of
blocks; torch.compile (Inductor) with ``torch._functorch.config.activation_memory_budget`` swept;
and remat.clients.torch.rematerialize at budgets given as fractions of the unpatched activation
peak. Each row gives the activation peak (bytes a step holds on top of parameters, buffers and
inputs, gradients left out) and the step time as a ratio to the unpatched step.

On the CPU the peak is exact (:class:`remat.clients.torch.LiveBytes`, with Inductor's buffer
allocator routed through it); on CUDA it is the allocator's peak above what was allocated before
the step. Times are medians over rounds that run every variant once, in turn: CUDA events on a
GPU; on the CPU, torch runs one intra-op thread and the step is timed by the CPU time the process
spends, which the load of other processes on a shared machine does not inflate (the wall clock
does, by several times). remat plans with costs measured the same way. glibc hands large freed
blocks back to the kernel and page-faults them in again at the next allocation, a cost that grows
with how often a step frees and allocates (PyTorch's CUDA allocator caches blocks instead); the
script restarts itself with glibc's trim and mmap thresholds raised, so that the CPU heap keeps
freed memory for every variant alike.

    python benchmarks/torch_client.py                          # all five models (long: compiles)
    python benchmarks/torch_client.py --models gpt --budgets 0.5 --compile-budgets 1.0,0.5
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from torch_models import CHECKPOINT_SETTINGS, MODELS  # noqa: E402

from remat.clients.torch import PlanRejected, activation_peak, rematerialize, time_call  # noqa: E402
from remat.schedules import RematError, format_size  # noqa: E402
from remat.solvers import STRATEGIES, solve  # noqa: E402

#: Sizes at which activations dominate the step's memory, and a CPU step takes well under a second.
SIZES: dict[str, dict[str, int]] = {
    "mlp": {"batch_size": 1024, "width": 512, "depth": 12},
    "resnet": {"batch_size": 16, "width": 16, "blocks": 2, "image": 32},
    "unet": {"batch_size": 4, "width": 16, "levels": 3, "image": 64},
    "gpt": {"batch_size": 8, "vocab": 512, "context": 128, "dim": 128, "heads": 4, "layers": 4},
    "lstm": {"batch_size": 64, "steps": 24, "features": 64, "hidden": 256},
}

#: glibc settings under which the CPU heap caches freed blocks (see the module docstring).
HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**30)}

BASELINES = ("ap-greedy", "linearized-greedy", "ap-sqrtn", "linearized-sqrtn", "chen-greedy", "griewank")


@dataclass
class Variant:
    """One way of running a model's training step."""

    name: str
    model: torch.nn.Module
    step: Callable[[], Any]
    note: str = ""
    inductor: bool = False
    peak: int = 0
    times: list[float] = field(default_factory=list)

    def run(self) -> None:
        for p in self.model.parameters():
            p.grad = None
        self.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: all five)")
    parser.add_argument("--budgets", default="0.75,0.5,0.3",
                        help="remat budgets, fractions of the unpatched activation peak")
    parser.add_argument("--compile-budgets", default="1.0,0.5,0.3",
                        help="values of activation_memory_budget for torch.compile ('' to skip)")
    parser.add_argument("--strategy", default="auto",
                        help="remat strategy; auto: checkmate if registered, else the best fitting baseline")
    parser.add_argument("--cost-model", default="measured", help="remat cost model: measured or flops")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds per remat solve")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (each runs every variant once)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        if any(os.environ.get(k) != v for k, v in HEAP_ENV.items()):
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **HEAP_ENV})
        torch.set_num_threads(1)
    budgets = [float(b) for b in args.budgets.split(",") if b]
    compile_budgets = [float(b) for b in args.compile_budgets.split(",") if b]
    print(_header(device))
    for name in args.models.split(","):
        _benchmark(name, device, budgets, compile_budgets, args)


def _benchmark(name: str, device: torch.device, budgets: list[float], compile_budgets: list[float],
               args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    base, inputs, loss_fn = MODELS[name](**SIZES[name])
    base.to(device)
    inputs = tuple(x.to(device) for x in inputs)

    def eager(model: torch.nn.Module) -> Callable[[], Any]:
        return lambda: loss_fn(model, *inputs).backward()

    unpatched = _variant("unpatched", base, eager)
    variants = [unpatched]
    for every in CHECKPOINT_SETTINGS[name]:
        variant = _variant(f"checkpoint every {every} block{'s' if every > 1 else ''}", base, eager)
        variant.model.checkpoint_every = every
        variants.append(variant)
    for budget in compile_budgets:
        variants.append(_compiled(base, inputs, loss_fn, budget))
    for variant in variants:
        _warm_up(variant)
        variant.peak = _measure_peak(variant)

    refused: list[str] = []
    for ratio in budgets:
        variant = _remat(base, inputs, loss_fn, ratio, unpatched.peak, args)
        if isinstance(variant, str):
            refused.append(variant)
            continue
        _warm_up(variant)
        variant.peak = _measure_peak(variant)
        variants.append(variant)
    for _ in range(args.rounds):
        for variant in variants:
            variant.times.append(time_call(variant.run, device=device, repeats=1, warmup=0, cpu_time=True).median_s)
    _table(name, variants, unpatched, budgets, refused)


# -- variants -----------------------------------------------------------------------------------------


def _variant(label: str, base: torch.nn.Module, make_step: Callable[[torch.nn.Module], Callable[[], Any]]) -> Variant:
    model = copy.deepcopy(base)
    return Variant(label, model, make_step(model))


def _compiled(base: torch.nn.Module, inputs: tuple[torch.Tensor, ...], loss_fn: Callable[..., Any],
              budget: float) -> Variant:
    """torch.compile (Inductor) of the whole step up to the loss, compiled under ``activation_memory_budget``."""
    model = copy.deepcopy(base)

    def forward(*xs: torch.Tensor) -> torch.Tensor:
        return loss_fn(model, *xs)

    compiled = torch.compile(forward, fullgraph=True, dynamic=False)

    def step() -> None:
        with torch._functorch.config.patch(activation_memory_budget=budget):
            compiled(*inputs).backward()

    return Variant(f"torch.compile, activation_memory_budget={budget}", model, step, inductor=True)


def _remat(base: torch.nn.Module, inputs: tuple[torch.Tensor, ...], loss_fn: Callable[..., Any], ratio: float,
           unpatched_peak: int, args: argparse.Namespace) -> Variant | str:
    """rematerialize() with ``ratio`` times the unpatched activation peak on top of what stays resident.

    Returns the variant, or a table row saying why there is no plan.
    """
    model = copy.deepcopy(base)
    profiled = rematerialize(model, inputs, budget_ratio=1.0, strategy="checkpoint-all", loss_fn=loss_fn,
                             cost_model=args.cost_model)
    graph, fixed = profiled.graph, profiled.fixed
    resident = sum(fixed[k] for k in ("parameters", "buffers", "inputs", "gradients"))
    budget = resident + int(ratio * unpatched_peak)
    strategy = _strategy(graph, budget, args)
    result = solve(graph, budget=budget, strategy=strategy, time_limit_s=args.time_limit).to_json()
    try:
        rm = rematerialize(model, inputs, loss_fn=loss_fn, graph=graph, result=result)
    except PlanRejected:
        return (f"| remat, budget {ratio:g} of unpatched | no plan | | " + "| " * len(args.budgets.split(",")) +
                f"| | {strategy}: {result['status']} after {result['solve_time_s']:.0f} s "
                f"(smallest feasible activation budget {format_size(graph.min_feasible_budget - resident)}) |")
    note = (f"{strategy}, {result['status']}, simulated overhead {result['overhead']:.3f}, simulated peak "
            f"{format_size(rm.simulation.peak_memory - graph.fixed_memory)}, solve {result['solve_time_s']:.0f} s")
    return Variant(f"remat, budget {ratio:g} of unpatched", model, lambda: rm(*inputs).backward(), note)


def _strategy(graph: Any, budget: int, args: argparse.Namespace) -> str:
    """The strategy to run: the one asked for; with auto, checkmate if registered, else the best baseline."""
    if args.strategy != "auto":
        return str(args.strategy)
    if "checkmate" in STRATEGIES:
        return "checkmate"
    best, best_cost = "checkpoint-all", float("inf")
    for name in BASELINES:
        try:
            result = solve(graph, budget=budget, strategy=name, time_limit_s=args.time_limit)
        except RematError:  # a chain-only heuristic on a DAG says so; the next one may apply
            continue
        if result.fits and result.cost is not None and result.cost < best_cost:
            best, best_cost = name, result.cost
    return best


# -- measuring -----------------------------------------------------------------------------------------


def _warm_up(variant: Variant) -> None:
    for _ in range(2):
        variant.run()


def _measure_peak(variant: Variant) -> int:
    with _inductor_buffers_counted() if variant.inductor else contextlib.nullcontext():
        for p in variant.model.parameters():
            p.grad = None
        return activation_peak(variant.step, variant.model.parameters())


@contextlib.contextmanager
def _inductor_buffers_counted() -> Iterator[None]:
    """Route Inductor's CPU buffer allocator through the dispatcher, where LiveBytes sees it."""
    from torch._inductor.codecache import PyCodeCache

    def empty_strided_cpu(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(size, stride, dtype=dtype, device="cpu")

    patched = [m for m in PyCodeCache.modules if hasattr(m, "empty_strided_cpu")]
    saved = [m.empty_strided_cpu for m in patched]
    for m in patched:
        m.empty_strided_cpu = empty_strided_cpu
    try:
        yield
    finally:
        for m, original in zip(patched, saved, strict=True):
            m.empty_strided_cpu = original


# -- reporting -----------------------------------------------------------------------------------------


def _table(name: str, variants: list[Variant], unpatched: Variant, budgets: list[float], refused: list[str]) -> None:
    base_time = statistics.median(unpatched.times)
    sizes = ", ".join(f"{k}={v}" for k, v in SIZES[name].items())
    print(f"\n### {name} ({sizes})\n")
    fits = " | ".join(f"fits {b:g}" for b in budgets)
    print(f"| variant | activation peak | peak / unpatched | {fits} | step time (ms) | time / unpatched | notes |")
    print("|---|---|---|" + "---|" * len(budgets) + "---|---|---|")
    for v in variants:
        t = statistics.median(v.times)
        marks = " | ".join("yes" if v.peak <= b * unpatched.peak else "no" for b in budgets)
        print(f"| {v.name} | {format_size(v.peak)} | {v.peak / unpatched.peak:.3f} | {marks} | {1e3 * t:.1f} | "
              f"{t / base_time:.3f} | {v.note} |")
    for row in refused:
        print(row)
    for b in budgets:
        print(_verdict(b, variants, unpatched, base_time))
    sys.stdout.flush()


def _verdict(budget: float, variants: list[Variant], unpatched: Variant, base_time: float) -> str:
    """One line: at this budget, the fastest fitting checkpoint setting against remat."""
    def fitting(prefix: str) -> list[Variant]:
        return [v for v in variants if v.name.startswith(prefix) and v.peak <= budget * unpatched.peak]

    def best(vs: list[Variant]) -> str:
        if not vs:
            return "none fits"
        v = min(vs, key=lambda v: statistics.median(v.times))
        return f"{v.name} ({statistics.median(v.times) / base_time:.3f})"

    remat = [v for v in fitting("remat") if v.name == f"remat, budget {budget:g} of unpatched"]
    return (f"\nAt {budget:g} of the unpatched peak: fastest fitting checkpoint: {best(fitting('checkpoint'))}; "
            f"fastest fitting torch.compile: {best(fitting('torch.compile'))}; remat: {best(remat)}.")


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
