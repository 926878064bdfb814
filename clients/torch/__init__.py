"""remat.clients.torch: capture a PyTorch training step, profile it, and train following a plan.

Needs the ``torch`` extra (``pip install remat[torch]``). :func:`rematerialize` is the drop-in
API; :func:`export_graph` writes the remat.graph/v1 that ``remat profile`` prints; :class:`LiveBytes`
and :func:`activation_peak` measure what a step really holds.
"""

from ._api import RematModule, check_result, export_graph, rematerialize
from ._capture import Capture, JointGraph, LossFn, Producer, capture
from ._costs import COST_MODELS, DEVICE_PROFILES, CostModel, DeviceProfile, measured_costs, node_costs, roofline_costs
from ._errors import CaptureError, PlanRejected
from ._measure import LiveBytes, StepTime, activation_peak, time_call

__all__ = [
    "COST_MODELS",
    "DEVICE_PROFILES",
    "Capture",
    "CaptureError",
    "CostModel",
    "DeviceProfile",
    "JointGraph",
    "LiveBytes",
    "LossFn",
    "PlanRejected",
    "Producer",
    "RematModule",
    "StepTime",
    "activation_peak",
    "capture",
    "check_result",
    "export_graph",
    "measured_costs",
    "node_costs",
    "rematerialize",
    "roofline_costs",
    "time_call",
]
