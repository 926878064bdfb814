"""A module planned for several micro-batches in flight (``in_flight=``), as a pipeline stage holds them: every
micro-batch's forward runs before the first backward, and the whole holds the budget."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from remat.clients.torch import PlanRejected, activation_peak, rematerialize  # noqa: E402
from remat.clients.torch._in_flight import RESERVE, micro_batch_bytes  # noqa: E402
from remat.clients.torch._planning import Planner  # noqa: E402
from remat.schedules import InvalidRequest  # noqa: E402

pytestmark = pytest.mark.torch

IN_FLIGHT = 3


def _stage() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(8)])


MICRO_BATCHES = [torch.randn(256, 64, generator=torch.Generator().manual_seed(k)) for k in range(IN_FLIGHT)]
HELD_BEFORE = sum(p.numel() * p.element_size() for p in _stage().parameters()) \
    + sum(x.numel() * x.element_size() for x in MICRO_BATCHES)


def _warm_up(module: nn.Module, model: nn.Module) -> tuple[int, list[torch.Tensor]]:
    """A first pipeline stage's warm-up: every micro-batch's forward, then their backwards; the peak (with what is
    held before: parameters and micro-batches) and the gradients."""
    def step() -> None:
        outputs = [module(x) for x in MICRO_BATCHES]
        for out in outputs:
            out.backward(torch.ones_like(out))

    model.zero_grad(set_to_none=True)
    peak = HELD_BEFORE + activation_peak(step, model.parameters())
    return peak, [p.grad for p in model.parameters()]


def test_a_plan_for_the_micro_batches_in_flight_holds_them_all_within_the_budget(monkeypatch):
    reference = _stage()
    eager_peak, expected = _warm_up(reference, reference)
    budget = HELD_BEFORE + (eager_peak - HELD_BEFORE) // 2

    one_at_a_time = _stage()
    planned_for_one = rematerialize(one_at_a_time, (MICRO_BATCHES[0],), budget=budget, progress=False, cache=False,
                                    time_limit_s=3)
    assert _warm_up(planned_for_one, one_at_a_time)[0] > budget  # each micro-batch keeps what one alone may

    model = _stage()
    planned = rematerialize(model, (MICRO_BATCHES[0],), budget=budget, in_flight=IN_FLIGHT, progress=False,
                            cache=False, time_limit_s=3)
    peak, gradients = _warm_up(planned, model)
    assert peak <= budget
    assert planned.plans[0].budget < budget  # the graph was solved for what the others leave
    # ... with a reserve that bounds what one micro-batch saves: searching the peak alone (bisection on the
    # graph's budget) found a plan of 2.04x the step's compute here, the reserve one of 1.43x
    assert RESERVE in planned.plans[0].joint.index and planned.plans[0].result.overhead < 1.75
    assert all(torch.equal(g, e) for g, e in zip(gradients, expected, strict=True))

    solves = []
    monkeypatch.setattr(Planner, "_solve", lambda *args, **kwargs: solves.append(args))
    twin = copy.deepcopy(planned)  # follows the plan it had, without searching its budget again
    assert _warm_up(twin, twin.model)[0] <= budget and not solves
    assert twin.plans[0].result == planned.plans[0].result


def test_too_many_micro_batches_in_flight_are_refused_with_what_to_change():
    model = _stage()
    with pytest.raises(PlanRejected, match=r"No plan holds 40 micro-batches in flight within .* Raise the budget, "
                                           r"or plan for fewer micro-batches in flight"):
        rematerialize(model, (MICRO_BATCHES[0],), activation_budget=0.9, in_flight=40, progress=False, cache=False,
                      time_limit_s=1)
    with pytest.raises(InvalidRequest, match="in_flight must be a whole number of micro-batches, at least 1"):
        rematerialize(model, (MICRO_BATCHES[0],), activation_budget=0.9, in_flight=0)


def test_in_one_f_one_b_order_the_step_holds_what_its_plans_say():
    # 1F1B: the first micro-batches' forwards run before any backward, then each backward is followed by the next
    # forward; every backward but the first adds into the gradients the first made, the backwards of forwards that
    # ran before them included, which each plan must count
    count = 2 * IN_FLIGHT
    reference = _stage()
    budget = HELD_BEFORE + (_warm_up(reference, reference)[0] - HELD_BEFORE) // 2
    model = _stage()
    planned = rematerialize(model, (MICRO_BATCHES[0],), budget=budget, in_flight=IN_FLIGHT, progress=False,
                            cache=False, time_limit_s=3)

    def forward(k: int) -> torch.Tensor:  # a micro-batch arrives as its forward starts, as a stage receives it
        return planned(torch.randn(256, 64, generator=torch.Generator().manual_seed(k)))

    def step() -> None:
        outputs = {k: forward(k) for k in range(IN_FLIGHT)}
        for k in range(count):
            out = outputs.pop(k)
            out.backward(torch.ones_like(out))
            if k + IN_FLIGHT < count:
                outputs[k + IN_FLIGHT] = forward(k + IN_FLIGHT)

    model.zero_grad(set_to_none=True)
    step()
    model.zero_grad(set_to_none=True)
    measured = sum(p.numel() * p.element_size() for p in model.parameters()) + activation_peak(step, model.parameters())
    planned_peaks = [p.simulation.peak_memory + (IN_FLIGHT - 1) * micro_batch_bytes(p.joint, p.graph, p.plan,
                                                                                    p.simulation)
                     for p in planned.plans]
    # the steps after the first backward (gradients present) follow the plan of those before it (made with them
    # resident): micro-batches of both are in flight together, each planned beside others saving as much as itself
    assert [p.source for p in planned.plans] == ["solved", "earlier"]
    assert planned.plans[1].result == planned.plans[0].result
    assert measured <= min(planned_peaks) <= budget
