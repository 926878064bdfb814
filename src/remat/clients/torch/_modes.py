"""A step called under dispatch modes of the user's (FlopCounterMode, a TorchDispatchMode of one's own) runs the
planned graphs under them.

TorchDynamo runs no compiled code while such a mode is active (only modes that ignore compile internals, as
:class:`._measure.LiveBytes` does, are let through), so a step compiled with ``fullgraph=True`` fails under one.
While the step is called, remat takes the modes off the stack (TorchDynamo compiles with them off in any case)
and puts them back around each planned graph it runs, as torch does for a mode that ignores compile internals:
the mode sees the ops of the plan, recomputations included, and the step computes what it computes without the
mode. The backward runs where ``backward()`` is called, under the modes active there.

FlopCounterMode also counts by module, through hooks that its ModuleTracker registers on every module; the
compiled step calls no module, and TorchDynamo cannot trace those hooks, so they are set aside while the step is
called: its flops count for the modules around the step (the RematModule, ``Global``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.utils._python_dispatch import _pop_mode, _push_mode, any_torch_dispatch_mode_on_stack

__all__ = ["modes_set_aside", "under_modes_set_aside"]

_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                 "_global_backward_hooks")
"""The dicts of hooks that ``torch.nn.modules.module`` calls for every module."""

_aside = threading.local()
"""``modes``: the dispatch modes taken off the stack for the step being called in this thread (top first)."""


@contextlib.contextmanager
def modes_set_aside() -> Iterator[None]:
    """Call a compiled step in the block: the dispatch modes TorchDynamo refuses to run compiled code under are
    taken off the stack, for :func:`under_modes_set_aside` to put back, and ModuleTracker's hooks set aside."""
    with _module_trackers_set_aside():
        if not any_torch_dispatch_mode_on_stack():
            yield
            return
        modes = [_pop_mode() for _ in range(torch._C._len_torch_dispatch_stack())]
        outer = getattr(_aside, "modes", [])
        _aside.modes = modes
        try:
            yield
        finally:
            _aside.modes = outer
            for mode in reversed(modes):
                _push_mode(mode)


@contextlib.contextmanager
def under_modes_set_aside() -> Iterator[None]:
    """Run a planned graph in the block under the modes :func:`modes_set_aside` took off the stack, if any."""
    modes = getattr(_aside, "modes", [])
    if not modes:
        yield
        return
    _aside.modes = []
    for mode in reversed(modes):
        _push_mode(mode)
    try:
        yield
    finally:
        for _ in modes:
            _pop_mode()
        _aside.modes = modes


@contextlib.contextmanager
def _module_trackers_set_aside() -> Iterator[None]:
    """The module hooks of ModuleTracker (FlopCounterMode's count by module) left out while the block runs."""
    from torch.utils.module_tracker import ModuleTracker

    aside: list[tuple[Any, int, Any]] = []
    for name in _GLOBAL_HOOKS:
        hooks = getattr(nn_module, name)
        aside += [(hooks, key, hook) for key, hook in hooks.items()
                  if isinstance(getattr(hook, "__self__", None), ModuleTracker)]
    for hooks, key, _ in aside:
        del hooks[key]
    try:
        yield
    finally:
        for hooks, key, hook in aside:
            hooks[key] = hook
        for hooks in {id(hooks): hooks for hooks, _, _ in aside}.values():
            for key in sorted(hooks):  # the order they were registered in (their handles' ids grow)
                hooks.move_to_end(key)
