"""``remat profile MODULE:FACTORY``: capture a model's training step and write its remat.graph/v1.

The factory contract: ``FACTORY()``, or ``FACTORY(batch_size=N)`` when ``--batch-size`` is given,
returns ``(model, example_inputs)``, or ``(model, example_inputs, loss_fn)`` with
``loss_fn(model, *example_inputs) -> loss``. ``example_inputs`` is what the model takes: a tensor,
a tuple of arguments or a dict of keyword arguments. MODULE is an importable module name or a path
to a ``.py`` file.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch

from remat.schedules import InvalidRequest, format_size

from ._api import export_graph

__all__ = ["load_factory", "run"]


def run(args: argparse.Namespace) -> int:
    """Profile the factory's model and write (or print) the graph; one summary line goes to stderr."""
    factory = load_factory(args.factory)
    made = factory(batch_size=args.batch_size) if args.batch_size is not None else factory()
    model, inputs, loss_fn = _unpack(made, args.factory)
    graph = export_graph(model, inputs, loss_fn=loss_fn, cost_model=args.cost_model, device=args.device)
    text = json.dumps(graph.to_json())
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        print(text)
    print(f"{graph.name}: {graph.size} nodes ({len(graph.forward_nodes)} forward), cost unit {graph.cost_unit!r}; "
          f"fixed {format_size(graph.fixed_memory)}, checkpoint-all peak {format_size(graph.checkpoint_all_peak)}, "
          f"min feasible budget {format_size(graph.min_feasible_budget)}", file=sys.stderr)
    return 0


def load_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``MODULE:FACTORY`` (a module name or a ``.py`` path, then an attribute)."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise InvalidRequest(f"{spec!r} is not MODULE:FACTORY (for example mypkg.models:make or models.py:make).",
                             field="factory")
    module = _import(module_name)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidRequest(f"{module_name} has no callable {attr!r}.", field="factory")
    return cast(Callable[..., Any], factory)


def _import(name: str) -> Any:
    if name.endswith(".py") or os.sep in name:
        path = Path(name)
        if not path.is_file():
            raise InvalidRequest(f"No such file: {name}.", field="factory")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        raise InvalidRequest(f"Cannot import {name!r}: {e}.", field="factory") from None


def _unpack(made: Any, spec: str) -> tuple[torch.nn.Module, Any, Any]:
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[0], torch.nn.Module):
        raise InvalidRequest(f"{spec} must return (model, example_inputs) or (model, example_inputs, loss_fn).",
                             field="factory")
    if not isinstance(made[1], (torch.Tensor, tuple, list, Mapping)):
        raise InvalidRequest(f"{spec} must return example inputs as a tensor, a tuple of arguments or a dict of "
                             f"keyword arguments, got {type(made[1]).__name__}.", field="factory")
    return made[0], made[1], made[2] if len(made) == 3 else None
