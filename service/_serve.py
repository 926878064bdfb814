"""The two long-running commands: ``remat serve`` (the API) and ``remat worker`` (cluster solves)."""

from __future__ import annotations

import logging
from typing import Any

import redis
import uvicorn
from pydantic import ValidationError

from remat.schedules import InvalidRequest

from ._app import create_app
from ._cluster import run_worker
from ._errors import QueueUnreachable
from ._settings import Settings

__all__ = ["load_settings", "serve", "work"]

log = logging.getLogger("remat.service")


def load_settings(**overrides: Any) -> Settings:
    """Settings from ``REMAT_*`` variables, with ``overrides`` (None values ignored) on top.

    Raises InvalidRequest naming the setting when a value is not acceptable.
    """
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        name = ".".join(str(p) for p in first["loc"])
        where = f"Setting {name!r} (REMAT_{name.upper()})" if name else "Settings"
        raise InvalidRequest(f"{where}: {first['msg']}.", field=name or None) from None


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def serve(settings: Settings) -> None:
    """Run the API on ``settings.host:settings.port`` until SIGINT or SIGTERM."""
    _configure_logging(settings)
    if not settings.queue_url:
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # an unusable data dir is a one-line error, here
    mode = f"queue {settings.queue_name!r} at {_redacted(settings.queue_url)}" if settings.queue_url else \
        f"embedded, {settings.slots} slots, store in {settings.data_dir}"
    log.info("remat serve: %s; authentication %s", mode, "on" if settings.auth_enabled else "off")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                timeout_graceful_shutdown=10)


def work(settings: Settings, *, burst: bool = False, name: str | None = None) -> None:
    """Run a worker on ``settings.queue_url`` until SIGINT or SIGTERM (or, with ``burst``, an empty queue)."""
    if not settings.queue_url:
        raise InvalidRequest("A worker needs a queue: pass --queue redis://HOST:PORT/DB or set REMAT_QUEUE_URL.",
                             field="queue_url")
    try:
        redis.Redis.from_url(settings.queue_url).ping()
    except redis.RedisError as e:
        raise QueueUnreachable(f"Cannot reach the queue at {_redacted(settings.queue_url)}: {e}") from None
    _configure_logging(settings)
    log.info("remat worker: queue %r at %s", settings.queue_name, _redacted(settings.queue_url))
    run_worker(settings, burst=burst, name=name)


def _redacted(url: str | None) -> str:
    """The URL without its password, for logs."""
    if not url or "@" not in url:
        return url or ""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
