"""remat.service.dashboard: what the pages under ``/dashboard`` show, loaded from the job store.

The pages themselves are rendered by :mod:`remat.report`; the router lives in
:mod:`remat.service.routes.dashboard`.
"""

from ._load import JobView, load_job, load_recent, load_sweep

__all__ = ["JobView", "load_job", "load_recent", "load_sweep"]
