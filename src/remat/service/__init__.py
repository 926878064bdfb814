"""remat.service: the HTTP API, the job store, and the executors that run solves.

``create_app(settings)`` builds the FastAPI app. Jobs live in a :class:`JobStore`
(:class:`SqliteStore` embedded, :class:`RedisStore` in cluster mode) and change state only through
its named transitions; the embedded :class:`LocalExecutor` and the RQ-backed
:class:`QueueExecutor` run them, each solve in its own child process group. Sweeps and max-batch
searches (:class:`MaxBatchSearch`) are records over ordinary jobs.
"""

from ._app import create_app
from ._cluster import QueueExecutor, run_worker
from ._errors import JobNotFound, QueueFull, QueueUnreachable, TooManyJobs, Unauthorized
from ._executor import Executor, open_executor
from ._jobs import Claim, Job, JobStatus, SolveSpec, reusable
from ._local import LocalExecutor
from ._maintenance import check_heartbeat
from ._max_batches import MaxBatchSearch
from ._redis import RedisStore
from ._serve import load_settings, serve, work
from ._settings import Settings
from ._sqlite import SqliteStore
from ._store import JobStore
from ._sweeps import Sweep, SweepPoint, sweep_status

__all__ = [
    "Claim",
    "Executor",
    "Job",
    "JobNotFound",
    "JobStatus",
    "JobStore",
    "LocalExecutor",
    "MaxBatchSearch",
    "QueueExecutor",
    "QueueFull",
    "QueueUnreachable",
    "RedisStore",
    "Settings",
    "SolveSpec",
    "SqliteStore",
    "Sweep",
    "SweepPoint",
    "TooManyJobs",
    "Unauthorized",
    "check_heartbeat",
    "create_app",
    "load_settings",
    "open_executor",
    "reusable",
    "run_worker",
    "serve",
    "sweep_status",
    "work",
]
