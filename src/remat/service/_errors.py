"""Errors only the service raises, in remat's tree so one handler maps them all to problem documents.

::

    RematError
    ├── JobNotFound    no job or sweep with that id (404)
    ├── Unauthorized   no valid bearer token (401)
    ├── TooManyJobs    the token has its maximum of queued and running jobs (429, Retry-After)
    ├── QueueFull      the queue holds its maximum of jobs (503, Retry-After)
    ├── StoreQuota     the token's stored results or graphs fill its share of the store (413)
    ├── QueueUnreachable  a worker's Redis refuses its credentials
    └── StoreUnusable  ``remat serve`` cannot open or write its embedded job store
"""

from __future__ import annotations

from remat.schedules import RematError

__all__ = ["JobNotFound", "QueueFull", "QueueUnreachable", "StoreQuota", "StoreUnusable", "TooManyJobs",
           "Unauthorized"]


class JobNotFound(RematError):
    """No job or sweep has this id (or none the caller's token may see)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"No job or sweep with id {job_id!r}.")
        self.job_id = job_id


class Unauthorized(RematError):
    """The request has no bearer token, or one the service does not accept."""


class _Busy(RematError):
    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TooManyJobs(_Busy):
    """The token already has as many queued or running jobs as it may; retry after ``retry_after_s``."""


class QueueFull(_Busy):
    """The service's queue is full; retry after ``retry_after_s``."""


class StoreQuota(RematError):
    """The token's stored results or graphs would exceed its share of the job store (a setting says how much)."""


class QueueUnreachable(RematError):
    """The Redis server of ``remat worker``'s queue refuses it (wrong password or rights); an unreachable one is
    waited for instead."""


class StoreUnusable(RematError):
    """``remat serve``'s SQLite job store is damaged, not a database, or cannot be written."""
