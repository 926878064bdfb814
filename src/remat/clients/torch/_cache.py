"""Plans kept on disk, so that running a training script again does not solve again.

A plan is keyed by what determines it: the graph's SHA-256 (its nodes, costs and sizes, so a new
input shape or model is a new graph), the budget in bytes, the strategy and the solver options.
Entries are remat.result/v1 files in ``$REMAT_CACHE_DIR`` (default ``~/.cache/remat/plans``, under
``$XDG_CACHE_HOME`` when set); the least recently used go once there are more than ``max_entries``.
A file is parsed as a :class:`~remat.solvers.ResultDocument` when read, and the result is checked like any
other before it runs, so a stale or damaged file costs a solve, never a wrong step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remat.schedules import InvalidResult
from remat.solvers import ResultDocument

__all__ = ["PlanCache", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``$REMAT_CACHE_DIR``, else ``$XDG_CACHE_HOME/remat/plans``, else ``~/.cache/remat/plans``."""
    if os.environ.get("REMAT_CACHE_DIR"):
        return Path(os.environ["REMAT_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "remat" / "plans"


class PlanCache:
    """A directory of results, one JSON file per key, bounded to ``max_entries`` (least recently used go first)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, max_entries: int = 256) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_entries = max_entries

    @staticmethod
    def key(graph_sha256: str, budget: int, strategy: str, options: Mapping[str, Any]) -> str:
        """The entry name of a plan for this graph, budget, strategy and solver options."""
        request = json.dumps([graph_sha256, budget, strategy, dict(options)], sort_keys=True, default=str)
        return hashlib.sha256(request.encode()).hexdigest()

    def get(self, key: str) -> ResultDocument | None:
        """The result stored under ``key``, or None (a file that cannot be read as a remat.result/v1 is removed)."""
        path = self.directory / f"{key}.json"
        try:
            result = ResultDocument.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, InvalidResult):
            path.unlink(missing_ok=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used
        return result

    def put(self, key: str, result: ResultDocument) -> None:
        """Store ``result`` under ``key`` atomically, then trim the directory to ``max_entries``."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(result.to_json(), f)
            os.replace(tmp, self.directory / f"{key}.json")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._trim()

    def _trim(self) -> None:
        entries = []
        for path in self.directory.glob("*.json"):
            with contextlib.suppress(FileNotFoundError):
                entries.append((path.stat().st_mtime, path))
        entries.sort()
        for _, path in entries[:max(0, len(entries) - self.max_entries)]:
            path.unlink(missing_ok=True)
