"""remat.clients.torch: plan a PyTorch training step within a memory budget and train following the plan.

Needs the ``torch`` extra (``pip install remat[torch]``). :func:`rematerialize` is the drop-in API,
:func:`enable` the same in place (for training frameworks: the Hugging Face Trainer, Lightning) and
:func:`backend` the same as a torch.compile backend; :func:`export_graph` writes the
remat.graph/v1 that ``remat profile`` prints; :class:`LiveBytes`, :func:`activation_peak` and
:func:`allocator_peak` measure what a step really holds.
"""

from ._api import RematModule, backend, capture, export_graph, rematerialize
from ._backend import COMPILERS, PlannedGraph, RematBackend
from ._cache import PlanCache
from ._capture import LossFn
from ._costs import COST_MODELS, DEVICE_PROFILES, CostModel, DeviceProfile, measured_costs, node_costs, roofline_costs
from ._enable import disable, enable, planned
from ._errors import CaptureError, PlanRejected
from ._explain import Explanation
from ._joint import JointGraph, Producer
from ._max_batch import max_batch
from ._measure import LiveBytes, StepTime, activation_peak, allocator_peak, time_call
from ._planning import Budget, check_result

__all__ = [
    "COMPILERS",
    "COST_MODELS",
    "DEVICE_PROFILES",
    "Budget",
    "CaptureError",
    "CostModel",
    "DeviceProfile",
    "Explanation",
    "JointGraph",
    "LiveBytes",
    "LossFn",
    "PlanCache",
    "PlanRejected",
    "PlannedGraph",
    "Producer",
    "RematBackend",
    "RematModule",
    "StepTime",
    "activation_peak",
    "allocator_peak",
    "backend",
    "capture",
    "check_result",
    "disable",
    "enable",
    "export_graph",
    "max_batch",
    "measured_costs",
    "node_costs",
    "planned",
    "rematerialize",
    "roofline_costs",
    "time_call",
]
