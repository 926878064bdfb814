"""Running a plan's ``offload``, ``reload`` and ``wait`` statements: copies to host memory and back beside the compute.

On a CUDA device each copy runs on a stream of its own (one for offloads, one for reloads), ordered
against the compute stream by events, as PyTorch's activation offloading does:

- an offload waits for the event recorded right after the value was computed, copies the value's
  whole storage into a pinned host buffer and records an event; the device storage is kept (by the
  planned graph) until the compute stream has waited for that event, then dropped, so the allocator
  reuses it in stream order (no ``record_stream``, whose deferred reuse lets memory grow);
- a reload allocates the device storage on the compute stream (where the allocator reuses what the
  compute stream freed), waits on the reload stream for the compute stream and for the offload's
  copy, copies back and records an event the compute stream waits for before it reads the value, or
  frees it;
- a plan's ``wait`` makes the compute stream wait for an offload's event where the plan says.

On the CPU the device is the host: the streams are no-ops and each copy is done when it returns, but
the same code runs, and the host buffer is made under :func:`~._measure.host_memory`, so that the
device-memory ruler (:class:`~._measure.LiveBytes`) counts it apart.

Where in the step the planned graph drops an offloaded value and issues a reload is the plan's to
say: :func:`effect_points` places each before the first compute that the simulator starts at or after
the moment the plan releases (or allocates) that memory, so the device memory in program order, which
is what the allocator follows, is the plan's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from remat.schedules import Plan, Timing

from ._measure import host_memory

__all__ = ["CHECK_COPIES", "CopyMismatch", "HostCopies", "effect_points"]


def effect_points(plan: Plan, timing: Timing) -> dict[int, int]:
    """For each offload and reload statement, the compute statement its memory effect comes right before.

    An offload's device memory goes when the plan releases it; a reload's comes when its copy starts.
    The effect lands before the first later compute whose allocation the plan makes after it
    (``timing.effect_order``), or at the end (``len(plan)``).
    """
    points: dict[int, int] = {}
    waiting: list[int] = []
    for k in timing.effect_order:
        op = plan.steps[k][0]
        if op in ("offload", "reload"):
            waiting.append(k)
        elif op == "compute":
            points.update((w, k) for w in waiting if w < k)
            waiting = [w for w in waiting if w > k]
    points.update(dict.fromkeys(waiting, len(plan)))
    return points


@dataclass(frozen=True)
class _Layout:
    """Where and how a value lies in its storage, to bring the reloaded storage back the same way."""

    device: torch.device
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class _Streams:
    """The offload and reload streams of one device, with events; every call is a no-op on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.offload = torch.cuda.Stream(device) if self.cuda else None
        self.reload = torch.cuda.Stream(device) if self.cuda else None

    def record(self, stream: torch.cuda.Stream | None = None) -> torch.cuda.Event | None:
        """An event at the current end of ``stream`` (the compute stream when None)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record(stream or torch.cuda.current_stream(self.device))
        return event

    def wait(self, event: torch.cuda.Event | None, stream: torch.cuda.Stream | None = None) -> None:
        """Make ``stream`` (the compute stream when None) wait for ``event``."""
        if self.cuda and event is not None:
            (stream or torch.cuda.current_stream(self.device)).wait_event(event)

    @contextlib.contextmanager
    def on(self, stream: torch.cuda.Stream | None) -> Iterator[None]:
        """Issue the block's kernels on ``stream``."""
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            yield


CHECK_COPIES = "REMAT_CHECK_COPIES"
"""Environment variable: set to 1, every reloaded value is checked against the value offloaded (a debug mode:
a digest of each is computed on the device, and the step waits for the comparison)."""


class CopyMismatch(RuntimeError):
    """A value came back from host memory with other bytes than it left with: the copies raced the compute."""


class HostCopies:
    """The copies of one planned step, called from its forward and backward graphs by node name and key.

    ``key`` names one tensor: a value, or one output of an op with several (``name[i]``). The events
    and layouts are kept by key from one call to the next; a step run again replaces them. With
    ``check`` (by default, the CHECK_COPIES environment variable), each value is digested on the compute
    stream where it is complete and again where it is reloaded and ready, and a difference raises
    CopyMismatch: stream races give silently wrong gradients otherwise.
    """

    def __init__(self, check: bool | None = None) -> None:
        self._streams: dict[torch.device, _Streams] = {}
        self._made: dict[str, torch.cuda.Event | None] = {}
        self._copied: dict[str, torch.cuda.Event | None] = {}
        self._loaded: dict[str, torch.cuda.Event | None] = {}
        self._layouts: dict[str, _Layout] = {}
        self.check = os.environ.get(CHECK_COPIES, "") not in ("", "0") if check is None else check
        self._digests: dict[str, torch.Tensor] = {}

    def made(self, name: str, value: Any) -> None:
        """Mark, on the compute stream, where ``value`` (the output of ``name``) is complete."""
        self._made[name] = self._on(_device(value)).record()

    def offload(self, value: torch.Tensor, name: str, key: str) -> torch.Tensor:
        """Start copying the storage of ``value`` to host memory once ``name`` is computed; the host copy.

        The caller keeps ``value`` until :meth:`release`.
        """
        streams = self._on(value.device)
        self._layouts[key] = _Layout(value.device, tuple(value.size()), tuple(value.stride()),
                                     int(value.storage_offset()))
        whole = value.as_strided((value.untyped_storage().nbytes() // value.element_size(),), (1,), 0)
        if self.check:
            self._digests[key] = _digest(whole)
        with host_memory():
            host = torch.empty(whole.shape, dtype=value.dtype, device="cpu", pin_memory=streams.cuda)
        streams.wait(self._made.get(name), streams.offload)
        with streams.on(streams.offload):
            host.copy_(whole, non_blocking=streams.cuda)
            self._copied[key] = streams.record(streams.offload)
        return host

    def release(self, key: str, value: torch.Tensor) -> None:
        """Where the plan releases the device memory of offloaded ``value``: the compute stream waits for its
        copy, and the caller drops it right after this call."""
        self.wait(key, value.device)

    def wait(self, key: str, device: torch.device) -> None:
        """Hold the compute stream until the offload of ``key`` has been copied (a plan's ``wait``)."""
        self._on(device).wait(self._copied.get(key))

    def reload(self, host: torch.Tensor, key: str) -> torch.Tensor:
        """Allocate the value of ``key`` on the device it left and start copying it back from ``host``."""
        layout = self._layouts[key]
        streams = self._on(layout.device)
        storage = torch.empty(host.shape, dtype=host.dtype, device=layout.device)
        issued = streams.record()
        with streams.on(streams.reload):
            streams.wait(issued, streams.reload)
            streams.wait(self._copied.get(key), streams.reload)
            storage.copy_(host, non_blocking=streams.cuda)
            self._loaded[key] = streams.record(streams.reload)
        return storage.as_strided(layout.size, layout.stride, layout.offset)

    def ready(self, value: torch.Tensor, key: str) -> torch.Tensor:
        """``value``, reloaded, once the compute stream has waited for its copy: before its first reader or its free."""
        self._on(value.device).wait(self._loaded.pop(key, None))
        if self.check:
            whole = value.as_strided((value.untyped_storage().nbytes() // value.element_size(),), (1,), 0)
            if not torch.equal(_digest(whole), self._digests.pop(key)):
                raise CopyMismatch(f"{key} came back from host memory with other bytes than it was offloaded with: "
                                   f"a copy raced the compute (a stream or event out of order).")
        return value

    def _on(self, device: torch.device) -> _Streams:
        if device not in self._streams:
            self._streams[device] = _Streams(device)
        return self._streams[device]


def _digest(whole: torch.Tensor) -> torch.Tensor:
    """Two sums of a flat tensor's bytes, plain and weighted by position, on its device (for CHECK_COPIES)."""
    data = whole.detach().view(torch.uint8).to(torch.int64)
    weights = torch.arange(1, data.numel() + 1, device=data.device, dtype=torch.int64) % 65521
    return torch.stack([data.sum(), (data * weights).sum()])


def _device(value: Any) -> torch.device:
    """The device of a value, or of an op's several outputs: the first not on the host (a random op's outputs
    on a CUDA device come with its generator state on the host, and the copies must wait for the former)."""
    tensors = [value] if isinstance(value, torch.Tensor) else [v for v in value if isinstance(v, torch.Tensor)]
    return next((t.device for t in tensors if t.device.type != "cpu"), tensors[0].device)
