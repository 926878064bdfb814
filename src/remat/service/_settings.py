"""The service's settings: one pydantic-settings class, read from ``REMAT_*`` environment variables.

Every limit has a unit in its name. Bad values are rejected when the service starts, not when the
first request arrives. Tokens are secrets: they never appear in the settings' repr or in logs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from remat.schedules import GraphLimits
from remat.solvers import SOLVE_GRACE_S

from ._store import Retention

__all__ = ["Settings", "default_data_dir"]


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/remat``, else ``~/.local/share/remat``: where the embedded job store lives."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "remat"


def _default_slots() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class Settings(BaseSettings):
    """How one ``remat serve`` or ``remat worker`` process behaves.

    Embedded mode (``queue_url`` unset) keeps jobs in SQLite under ``data_dir`` and runs them in
    ``slots`` child processes; cluster mode keeps them in Redis and runs them on ``remat worker``s.
    """

    model_config = SettingsConfigDict(env_prefix="REMAT_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    data_dir: Path = Field(default_factory=default_data_dir)
    queue_url: str | None = Field(default=None, repr=False)
    """``redis://[:password@]host:port/db``: cluster mode, with jobs in Redis and solves on ``remat worker``s
    (left out of the settings' repr: it may hold a password)."""
    queue_name: str = Field(default="remat", pattern=r"^[A-Za-z0-9_-]+$")
    """RQ queue the API fills and workers empty (Redis list ``rq:queue:<name>``)."""
    redis_prefix: str = Field(default="remat:", pattern=r"^[A-Za-z0-9_.:-]+$")
    """Prefix of the job store's Redis keys; deployments sharing one Redis use different prefixes."""

    tokens: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    """Bearer tokens accepted by the API (``REMAT_TOKENS``, comma-separated); none: no authentication."""
    insecure: bool = False
    """Serve without tokens on an address other machines can reach (``remat serve`` refuses otherwise)."""

    slots: int = Field(default_factory=_default_slots, ge=1, le=256)
    """Solves the embedded executor runs at once (each in its own process)."""
    solver_threads: int | None = Field(default=None, ge=1, le=256)
    """Threads each solve may use; default: the machine's cores shared between the slots."""

    max_body_bytes: int = Field(default=32 * 2**20, ge=1024)
    """Largest request body (a 100,000-node captured graph is about 15 MB of JSON, one of 200,000 nodes about
    30 MB); beyond it, 413."""
    max_body_bytes_in_flight: int = Field(default=64 * 2**20, ge=1024)
    """Bytes of all the authenticated request bodies the API handles at once (each costs about fifteen times its
    size while it is parsed); a request finding no room within 10 s gets 503 with Retry-After."""
    max_body_bytes_per_token: int | None = Field(default=None, ge=1024)
    """Bytes of one token's request bodies the API handles at once, so that its stalled or slow bodies leave
    room for the others; default: half of max_body_bytes_in_flight, and at least max_body_bytes."""
    body_timeout_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """Seconds a request body may take to arrive in full once the API starts reading it; beyond, 408 and the
    connection closed."""
    max_nodes: int = Field(default=GraphLimits.max_nodes, ge=1)
    """Most nodes of a graph a request may send (422 beyond); strategies that grow faster than the graph take
    fewer (``GET /v1/strategies`` lists each one's ``max_nodes``)."""
    max_edges: int = Field(default=GraphLimits.max_edges, ge=0)
    """Most edges (deps of all nodes together) of a graph a request may send (422 beyond)."""
    max_time_limit_s: float = Field(default=3600.0, gt=0)
    default_time_limit_s: float = Field(default=60.0, gt=0)
    max_wait_s: float = Field(default=60.0, ge=0)
    default_wait_s: float = Field(default=10.0, ge=0)
    max_queued_jobs: int = Field(default=1000, ge=1)
    """Jobs that may wait in the queue; beyond it submissions get 503 with Retry-After."""
    max_active_jobs_per_token: int = Field(default=500, ge=1)
    """Queued or running jobs one token may have, each max-batch search holding one for every strategy it still
    searches (its next batch's); beyond it submissions get 429 with Retry-After."""
    max_searches_per_token: int = Field(default=20, ge=1)
    """Max-batch searches one token may have going on; beyond it ``POST /v1/max-batch`` gets 429."""
    max_sweep_points: int = Field(default=400, ge=1)

    lease_s: float = Field(default=15.0, gt=0)
    """A running job's owner renews its lease every lease_s / 5 seconds; a job whose lease ran out (longer
    for an owner on this host that is still alive) is taken back and run again, or failed after max_attempts."""
    max_attempts: int = Field(default=2, ge=1)
    """Runs a job gets when the process running it dies; after the last it is marked failed."""
    cancel_grace_s: float = Field(default=SOLVE_GRACE_S, ge=0)
    """Seconds a cancelled solve has to return its best plan before its process group is killed."""
    retry_after_s: int = Field(default=5, ge=1)

    share_results: bool = True
    """Answer a token's request with a copy of a reusable result another token got for the same request (the
    job stays the token's own; the instant answer tells it such a request was made before)."""
    max_result_bytes: int = Field(default=64 * 2**20, ge=2**16)
    """Largest result (remat.result/v1 as JSON) a job may store; a bigger one fails the job, saying so."""
    max_result_bytes_per_token: int = Field(default=4 * 2**30, ge=2**16)
    """Bytes of results one token's jobs may keep in the store; once they reach it, its submissions get 413 until
    retention deletes some (a job that runs meanwhile may add its own result, up to max_result_bytes)."""
    max_graph_bytes_per_token: int = Field(default=2**30, ge=2**16)
    """Bytes of graphs one token's requests may keep in the store (a graph another token stored first is charged to
    that one); a request whose new graphs would pass it gets 413 until retention deletes some."""
    retention_s: float = Field(default=7 * 86400.0, gt=0)
    """Ended jobs and sweeps older than this are deleted, with the graphs nothing kept refers to."""
    retention_jobs: int = Field(default=100_000, ge=1)
    """Most ended jobs kept (the newest); beyond it the oldest are deleted."""
    retention_sweeps: int = Field(default=10_000, ge=1)
    """Most sweeps kept (the newest)."""
    expire_interval_s: float = Field(default=60.0, gt=0)
    """Seconds between two retention passes of each API process and worker."""
    heartbeat_file: Path | None = None
    """A file every maintenance pass touches (about every lease_s / 2): ``remat healthcheck`` reads its age (the
    image sets it for both roles); unset, nothing is written."""

    reconnect_max_wait_s: float = Field(default=5.0, gt=0)
    """Longest wait between two tries to reach Redis while it is down (the first after 0.5 s, then doubling): a
    ``remat worker`` waits out an outage, at start or later, and takes jobs again this long after it ends at most."""

    log_level: str = "info"

    @field_validator("tokens", mode="before")
    @classmethod
    def _split_tokens(cls, value: object) -> object:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @field_validator("tokens")
    @classmethod
    def _long_enough(cls, value: list[SecretStr]) -> list[SecretStr]:
        for token in value:
            if len(token.get_secret_value()) < 16:
                raise ValueError("every token must be at least 16 characters long")
        return value

    @field_validator("queue_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if not value:  # REMAT_QUEUE_URL= (empty) means embedded
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("queue_url must be a redis://, rediss:// or unix:// URL")
        return value

    @model_validator(mode="after")
    def _a_body_fits_the_bodies_in_flight(self) -> Settings:
        if self.max_body_bytes > self.max_body_bytes_in_flight:
            raise ValueError(f"max_body_bytes ({self.max_body_bytes}) must not exceed max_body_bytes_in_flight "
                             f"({self.max_body_bytes_in_flight})")
        share = self.max_body_bytes_per_token
        if share is not None and not self.max_body_bytes <= share <= self.max_body_bytes_in_flight:
            raise ValueError(f"max_body_bytes_per_token ({share}) must lie between max_body_bytes "
                             f"({self.max_body_bytes}) and max_body_bytes_in_flight ({self.max_body_bytes_in_flight})")
        return self

    @model_validator(mode="after")
    def _sweeps_fit_the_queue(self) -> Settings:
        if self.max_sweep_points > self.max_queued_jobs:
            raise ValueError(f"max_sweep_points ({self.max_sweep_points}) must not exceed max_queued_jobs "
                             f"({self.max_queued_jobs}): a sweep must fit the queue")
        return self

    @property
    def auth_enabled(self) -> bool:
        return bool(self.tokens)

    @property
    def retention(self) -> Retention:
        return Retention(self.retention_s, self.retention_jobs, self.retention_sweeps)

    @property
    def body_share_bytes(self) -> int:
        """Bytes of one token's request bodies handled at once (``max_body_bytes_per_token`` or its default)."""
        if self.max_body_bytes_per_token is not None:
            return self.max_body_bytes_per_token
        return max(self.max_body_bytes, self.max_body_bytes_in_flight // 2)

    @property
    def graph_limits(self) -> GraphLimits:
        return GraphLimits(max_nodes=self.max_nodes, max_edges=self.max_edges)

    @property
    def threads_per_solve(self) -> int:
        return self.solver_threads or max(1, (os.cpu_count() or 1) // self.slots)
