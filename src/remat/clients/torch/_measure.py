"""Measuring a training step: its activation peak and its time, on the CPU or a CUDA device.

On the CPU, :class:`LiveBytes` counts the bytes of every storage created while it is active and
reads the total right after each op, the simulator's rule, so a plan's simulated peak can be
checked to the byte; buffers that Inductor-compiled code allocates are counted too (their
allocator is routed through the dispatcher while the mode is active), and so are storages resized in place
(``UntypedStorage.resize_``, which FSDP2 uses to gather parameters and free them). Host copies of offloaded
values, made under :func:`host_memory`, are counted apart: on the CPU the device is the host, and
the ruler still tells the two memories apart. On CUDA, the allocator's peak is used (it adds
rounding and workspaces). :func:`allocation_peaks` and :func:`allocator_peak` read the allocator on
both: on the CPU from the profiler's allocation events, which also count the buffers kernels
allocate and free inside an op (their workspaces), which no dispatcher mode sees.
Times are medians of repeated runs: CUDA events on a GPU, the wall clock or the process's CPU
time on the CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["Allocation", "LiveBytes", "StepTime", "activation_peak", "allocation_peaks", "allocator_peak",
           "host_memory", "time_call"]

_making = threading.local()


@contextlib.contextmanager
def host_memory() -> Iterator[None]:
    """Storages made in this block are host copies of device values: :class:`LiveBytes` counts them apart."""
    before = getattr(_making, "host", False)
    _making.host = True
    try:
        yield
    finally:
        _making.host = before


@dataclass(frozen=True)
class _Allocation:
    nbytes: int
    host: bool = False
    """A host copy (made under :func:`host_memory`): counted in ``host_current``, not ``current``."""


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created under the mode that are still alive, and their peak after each op.

    Storages that exist before the mode starts (parameters, inputs) are not counted, but what they grow or
    shrink by when resized in place is (FSDP2 gathers a block's parameters into storages it resized to nothing
    after the block last ran). Run one
    warm-up step outside the mode first: tracing and compilation create storages of their own.
    Host copies (made under :func:`host_memory`) are counted in ``host_current`` and ``host_peak``
    instead, so ``current``, ``peak`` and ``timeline`` are device memory even on the CPU.

    Examples
    --------
    >>> with LiveBytes() as live:
    ...     a = torch.ones(256)           # 1 KiB
    ...     b = a * 2                     # 1 KiB more: peak 2 KiB
    ...     del a
    ...     c = b + 1                     # 1 KiB freed, 1 KiB made: still 2 KiB
    >>> live.peak, live.current
    (2048, 2048)
    """

    supports_higher_order_operators = True
    """Random-state replay (a higher-order op) runs through the count like any other op."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.current = 0
        self.peak = 0
        self.host_current = 0
        self.host_peak = 0
        self.timeline: list[int] = []
        self._live: dict[int, _Allocation] = {}
        self._refs: list[weakref.ref[Any]] = []

    def __enter__(self) -> LiveBytes:
        self._inductor = _InductorBuffers()
        self._inductor.__enter__()
        self._resizes = _Resizes(self._resized)
        self._resizes.__enter__()
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        self._resizes.__exit__(*exc)
        self._inductor.__exit__(*exc)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let torch.compile trace through while the mode is active (it counts the compiled code's storages)."""
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        seen = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._track(t.untyped_storage(), seen)
        self.timeline.append(self.current)
        self.peak = max(self.peak, self.current)
        self.host_peak = max(self.host_peak, self.host_current)
        return out

    def _track(self, storage: torch.UntypedStorage, seen: set[int]) -> None:
        key = storage._cdata
        if key in seen or key in self._live:
            return
        seen.add(key)
        record = _Allocation(storage.nbytes(), host=getattr(_making, "host", False))
        self._live[key] = record
        self._count(record, +1)
        self._refs.append(weakref.ref(storage, self._on_death(key)))

    def _resized(self, storage: torch.UntypedStorage, before: int) -> None:
        """Count what a storage resized in place from ``before`` bytes grew or shrank by (one made before the mode
        counts from nothing, as if made empty when the mode started)."""
        key = storage._cdata
        record = self._live.get(key)
        if record is None:
            record = _Allocation(0, host=getattr(_making, "host", False))
            self._refs.append(weakref.ref(storage, self._on_death(key)))
        resized = dataclasses.replace(record, nbytes=record.nbytes + storage.nbytes() - before)
        self._count(record, -1)
        self._count(resized, +1)
        self._live[key] = resized
        self.timeline.append(self.current)
        self.peak = max(self.peak, self.current)

    def _on_death(self, key: int) -> Callable[[Any], None]:
        """The weakref callback for the storage at ``key``: it leaves the count when it dies."""

        def release(_: Any) -> None:
            record = self._live.pop(key, None)
            if record is not None:
                self._count(record, -1)

        return release

    def _count(self, record: _Allocation, sign: int) -> None:
        if record.host:
            self.host_current += sign * record.nbytes
        else:
            self.current += sign * record.nbytes


class _InductorBuffers:
    """While active, the CPU buffers of Inductor-compiled code are made with ``torch.empty_strided``,
    which the dispatcher (and so a TorchDispatchMode) sees; Inductor's own allocator bypasses it."""

    def __enter__(self) -> None:
        import sys

        codecache = sys.modules.get("torch._inductor.codecache")
        modules = list(codecache.PyCodeCache.modules) if codecache is not None else []
        self._patched = [(m, m.empty_strided_cpu) for m in modules if hasattr(m, "empty_strided_cpu")]
        for m, _ in self._patched:
            m.empty_strided_cpu = _empty_strided_cpu

    def __exit__(self, *exc: Any) -> None:
        for m, original in self._patched:
            m.empty_strided_cpu = original


class _Resizes:
    """While active, every ``UntypedStorage.resize_`` (which the dispatcher does not see) is reported to ``report``
    with the storage and its bytes before."""

    def __init__(self, report: Callable[[torch.UntypedStorage, int], None]) -> None:
        self._report = report

    def __enter__(self) -> None:
        self._patched = torch.UntypedStorage.__dict__.get("resize_")  # another count's, when nested
        resize = torch.UntypedStorage.resize_
        report = self._report

        def resize_and_report(storage: torch.UntypedStorage, size: int) -> Any:
            before = storage.nbytes()
            out = resize(storage, size)
            report(storage, before)
            return out

        torch.UntypedStorage.resize_ = resize_and_report  # type: ignore[method-assign,assignment]

    def __exit__(self, *exc: Any) -> None:
        if self._patched is None:
            del torch.UntypedStorage.resize_  # the inherited method again
        else:
            torch.UntypedStorage.resize_ = self._patched  # type: ignore[method-assign]


def _empty_strided_cpu(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="cpu")


def activation_peak(step: Callable[[], Any], parameters: Iterable[torch.Tensor]) -> int:
    """Peak bytes one training step adds to what is resident before it: activations and new gradients.

    ``step`` runs forward and backward (``.grad`` of ``parameters`` None before it, or the gradients it
    adds into count as resident). On the CPU the count is exact (:class:`LiveBytes`); on CUDA it is the
    allocator's peak above the bytes allocated before the step. Either way it is what a plan's peak
    less the step's resident memory (``joint.resident_memory``) promises.
    """
    parameters = list(parameters)
    device = parameters[0].device if parameters else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    with LiveBytes() as live:
        step()
    return live.peak


@dataclass(frozen=True)
class Allocation:
    """What the allocator held while a call ran, in bytes above what it held when the call started."""

    peak: int
    """The most it held at once."""
    held: int
    """What it held at the call's end, with the call's results still alive."""


_WINDOW = "remat.measure.call."
"""The profiler label of each call :func:`allocation_peaks` measures on the CPU (and the call's position)."""


def allocation_peaks(calls: Sequence[Callable[[], Any]], device: torch.device) -> list[Allocation]:
    """Run ``calls`` in turn and say, for each, what the allocator of ``device`` held while it ran.

    On CUDA from the caching allocator's statistics; on the CPU from the allocation events of one
    profiler session around them all (torch reports every CPU allocation and its running total
    there), so that each call costs little more than itself. Each call's results live until its
    measure is taken.
    """
    if device.type == "cuda":
        return [_cuda_allocation(call, device) for call in calls]
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    if torch.autograd.profiler._is_profiler_enabled:
        raise RuntimeError("The CPU allocator is read through the profiler, which is already running; "
                           "measure outside the profiler.")
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():  # torch's profiler prints a line to stderr when it starts and when it stops
        prof.start()
    try:
        for k, call in enumerate(calls):
            with record_function(f"{_WINDOW}{k}"):
                results = call()
            del results
    finally:
        with _quiet_stderr():
            prof.stop()
    windows, events = _cpu_events(prof)
    measured = []
    for k in range(len(calls)):
        start, end = windows[k]
        inside = [(size, total) for at, size, total in events if start <= at <= end]
        if not inside:
            measured.append(Allocation(0, 0))
            continue
        before = inside[0][1] - inside[0][0]
        measured.append(Allocation(max(total for _, total in inside) - before, inside[-1][1] - before))
    return measured


def allocator_peak(step: Callable[[], Any], device: torch.device | str = "cpu") -> int:
    """Peak bytes the allocator of ``device`` holds while ``step`` runs, above what it held before: what
    :class:`LiveBytes` counts and what kernels allocate inside their ops (a convolution's workspace)."""
    return allocation_peaks([step], torch.device(device))[0].peak


def _cuda_allocation(call: Callable[[], Any], device: torch.device) -> Allocation:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    results = call()
    torch.cuda.synchronize(device)
    measured = Allocation(torch.cuda.max_memory_allocated(device) - before,
                          torch.cuda.memory_allocated(device) - before)
    del results
    return measured


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The process's standard error (its file descriptor, where native code writes) goes nowhere in this block."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_events(prof: Any) -> tuple[dict[int, tuple[int, int]], list[tuple[int, int, int]]]:
    """The profiled calls' windows (start and end, in ns, by position) and the CPU allocation events (time,
    bytes allocated or freed, the allocator's running total), in time order."""
    from torch._C._profiler import _EventType

    windows: dict[int, tuple[int, int]] = {}
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.name.startswith(_WINDOW):
            windows[int(event.name[len(_WINDOW):])] = (event.start_time_ns, event.end_time_ns)
        elif event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            events.append((event.start_time_ns, event.extra_fields.alloc_size, event.extra_fields.total_allocated))
    return windows, sorted(events, key=lambda e: e[0])


@dataclass(frozen=True)
class StepTime:
    """Seconds per run over repeated runs: the median and the spread of the middle half."""

    median_s: float
    q1_s: float
    q3_s: float
    runs: int


def time_call(fn: Callable[[], Any], *, device: torch.device, repeats: int = 5, warmup: int = 1,
              cpu_time: bool = False) -> StepTime:
    """Time ``fn`` on ``device``: CUDA events on a GPU, the wall clock on the CPU; medians are robust to noise.

    With ``cpu_time`` the CPU is timed by the CPU time this process spends instead, which other
    processes' load does not inflate: the right clock on a shared machine when torch runs one
    intra-op thread (with several, it adds up every thread's time).
    """
    for _ in range(warmup):
        fn()
    samples = [_once(fn, device, cpu_time) for _ in range(repeats)]
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4)
    else:
        q1, q3 = min(samples), max(samples)
    return StepTime(statistics.median(samples), q1, q3, len(samples))


def _once(fn: Callable[[], Any], device: torch.device, cpu_time: bool) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    clock = time.process_time if cpu_time else time.perf_counter
    begin = clock()
    fn()
    return clock() - begin
