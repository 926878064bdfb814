"""One APIRouter per resource; :func:`remat.service.create_app` includes them all."""

from .dashboard import router as dashboard
from .health import router as health
from .jobs import router as jobs
from .max_batch import router as max_batch
from .solve import router as solve
from .strategies import router as strategies
from .sweeps import router as sweeps

__all__ = ["dashboard", "health", "jobs", "max_batch", "solve", "strategies", "sweeps"]
