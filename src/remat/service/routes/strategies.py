"""``GET /v1/strategies``: the strategy registry and the solver backends installed here."""

from __future__ import annotations

from fastapi import APIRouter

from remat.solvers import STRATEGIES, available_backends

from .._problems import PROBLEM_RESPONSES
from .._schemas import OptionPublic, StrategiesPublic, StrategyPublic

router = APIRouter(prefix="/v1", tags=["strategies"])


@router.get("/strategies", operation_id="list_strategies", response_model=StrategiesPublic,
            responses=PROBLEM_RESPONSES)
def list_strategies() -> StrategiesPublic:
    """Every strategy, the backends it can use, whether it offloads (and so needs ``transfer``), the options it
    reads with the values each accepts, the most nodes it takes (where fewer than the service's limit), and which
    backends are installed on this server."""
    return StrategiesPublic(
        strategies=[StrategyPublic(name=s.name, summary=s.summary, backends=list(s.backends), knob=s.knob,
                                   offloads=s.offloads, max_nodes=s.node_limit.nodes if s.node_limit else None,
                                   options={name: OptionPublic(summary=o.summary, accepts=o.accepts)
                                            for name, o in s.options.items()})
                    for s in STRATEGIES.values()],
        installed_backends=list(available_backends()),
    )
