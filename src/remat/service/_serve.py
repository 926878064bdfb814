"""The two long-running commands: ``remat serve`` (the API) and ``remat worker`` (cluster solves)."""

from __future__ import annotations

import copy
import ipaddress
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError
from uvicorn.config import LOGGING_CONFIG

from remat.schedules import InvalidRequest

from ._app import create_app
from ._cluster import run_worker
from ._errors import QueueUnreachable, StoreUnusable
from ._executor import STORE_FILE
from ._reconnect import REFUSED
from ._settings import Settings
from ._sqlite import SqliteStore
from ._urls import redacted

__all__ = ["RedactTokens", "load_settings", "redacted", "serve", "work"]

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
    """Run the API on ``settings.host:settings.port`` until SIGINT or SIGTERM.

    Refuses (InvalidRequest) to listen beyond this machine without tokens, unless ``settings.insecure``.
    """
    _refuse_open_exposure(settings)
    if not settings.queue_url:
        settings.data_dir.mkdir(parents=True, exist_ok=True)  # an unusable data dir is a one-line error, here
        _check_store(settings.data_dir / STORE_FILE)
    _configure_logging(settings)
    mode = f"queue {settings.queue_name!r} at {redacted(settings.queue_url)}" if settings.queue_url else \
        f"embedded, {settings.slots} slots, store in {settings.data_dir}"
    log.info("remat serve: %s; authentication %s", mode, "on" if settings.auth_enabled else "off")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level,
                log_config=_uvicorn_logging(), timeout_graceful_shutdown=10)


def _check_store(path: Path) -> None:
    """Open the embedded store and write to it once, so that a damaged or read-only file is a one-line
    StoreUnusable saying what to do, here, rather than a traceback when the app starts or a 503 per request."""
    try:
        SqliteStore(path).close()
    except sqlite3.DatabaseError as e:  # OperationalError (read-only, locked) included
        raise StoreUnusable(
            f"The job store {path} cannot be used: {e}. If it is damaged or not a remat store, move it aside (a new "
            f"one is made) or restore a backup; if it is read-only, make it and {path.parent} writable by this "
            f"user; or give another --data-dir (REMAT_DATA_DIR).") from None


def _refuse_open_exposure(settings: Settings) -> None:
    if settings.auth_enabled or settings.insecure or _loopback(settings.host):
        return
    raise InvalidRequest(f"Refusing to listen on {settings.host} without authentication: set REMAT_TOKENS (one or "
                         f"more comma-separated tokens), listen on 127.0.0.1, or pass --insecure "
                         f"(REMAT_INSECURE=1) to serve anyone who can reach this address.", field="tokens")


def _loopback(host: str) -> bool:
    """True for an address only this machine can reach (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class RedactTokens(logging.Filter):
    """Replaces the value of a ``token=`` query parameter in uvicorn's access log lines with ``***``."""

    _TOKEN = re.compile(r"([?&]token=)[^&\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self._TOKEN.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


def _uvicorn_logging() -> dict[str, Any]:
    """uvicorn's logging configuration with :class:`RedactTokens` on its access log."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_tokens"] = {"()": RedactTokens}
    config["handlers"]["access"].setdefault("filters", []).append("redact_tokens")
    return config


def work(settings: Settings, *, burst: bool = False, name: str | None = None) -> None:
    """Run a worker on ``settings.queue_url`` until SIGINT or SIGTERM (or, with ``burst``, an empty queue).

    An unreachable Redis is waited for, at start and later; one that refuses the worker's credentials is a
    QueueUnreachable, which no wait mends.
    """
    if not settings.queue_url:
        raise InvalidRequest("A worker needs a queue: pass --queue redis://HOST:PORT/DB or set REMAT_QUEUE_URL.",
                             field="queue_url")
    _configure_logging(settings)
    log.info("remat worker: queue %r at %s", settings.queue_name, redacted(settings.queue_url))
    try:
        run_worker(settings, burst=burst, name=name)
    except REFUSED as e:
        raise QueueUnreachable(f"The queue at {redacted(settings.queue_url)} refuses this worker: {e}") from None
