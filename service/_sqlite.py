"""The embedded job store: one SQLite file in WAL mode, shared safely by threads and processes."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from remat.schedules import JobNotFound

from . import _jobs
from ._jobs import Job, JobStatus
from ._store import KEEP, RESULT_BULK, Change, JobStore
from ._sweeps import Sweep

__all__ = ["SqliteStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    token TEXT,
    created_at REAL NOT NULL,
    queued_at REAL NOT NULL,
    record TEXT NOT NULL,
    result TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, queued_at);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at);
CREATE INDEX IF NOT EXISTS jobs_by_token ON jobs (token, status);
CREATE TABLE IF NOT EXISTS graphs (sha256 TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (id TEXT PRIMARY KEY, created_at REAL NOT NULL, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sweeps_by_created ON sweeps (created_at);
PRAGMA user_version = 1;
"""
_ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)


class SqliteStore(JobStore):
    """Jobs in ``<data_dir>/jobs.sqlite3``; every transition is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str | Path, **policy: Any) -> None:
        super().__init__(**policy)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._conn().executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    # -- jobs --------------------------------------------------------------------------------------

    def _insert(self, job: Job) -> bool:
        cur = self._conn().execute(
            "INSERT OR IGNORE INTO jobs (id, status, token, created_at, queued_at, record) VALUES (?, ?, ?, ?, ?, ?)",
            (job.id, job.status.value, job.token, job.created_at, job.queued_at, json.dumps(job.to_record())))
        return cur.rowcount == 1

    def _update(self, job_id: str, change: Change, *, result: Mapping[str, Any] | None = KEEP) -> Job | None:
        with self._immediate() as conn:
            return self._apply(conn, job_id, change, result)

    @contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken at once (no other writer can slip in between read and write)."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")  # inside the try: a COMMIT that fails (busy, disk full) rolls back too
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _apply(self, conn: sqlite3.Connection, job_id: str, change: Change,
               result: Mapping[str, Any] | None) -> Job | None:
        row = conn.execute("SELECT record FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        new = change(Job.from_record(json.loads(row[0])))
        if new is None:
            return None
        conn.execute("UPDATE jobs SET status = ?, token = ?, created_at = ?, queued_at = ?, record = ? WHERE id = ?",
                     (new.status.value, new.token, new.created_at, new.queued_at, json.dumps(new.to_record()), job_id))
        if result is not KEEP:
            conn.execute("UPDATE jobs SET result = ? WHERE id = ?",
                         (None if result is None else json.dumps(result), job_id))
        return new

    def claim_next(self, owner: str) -> Job | None:
        """Claim the job that has waited longest, if any: the embedded executor's queue."""
        with self._immediate() as conn:
            row = conn.execute("SELECT id FROM jobs WHERE status = ? ORDER BY queued_at LIMIT 1",
                               (JobStatus.QUEUED.value,)).fetchone()
            return None if row is None else self._apply(conn, row[0], lambda j: _jobs.claim(
                j, owner=owner, now=time.time(), lease_s=self.lease_s), KEEP)

    def get(self, job_id: str, *, with_result: bool = True) -> Job:
        column = "result" if with_result else "NULL"
        row = self._conn().execute(f"SELECT record, {column} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return _job(row)

    def get_many(self, job_ids: Sequence[str], *, with_result: bool = False) -> list[Job]:
        column = "result" if with_result else "NULL"
        found = {row[2]: _job(row) for row in self._rows_of(f"SELECT record, {column}, id FROM jobs", job_ids)}
        return [found[i] for i in job_ids if i in found]

    def result_summaries(self, job_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """As JobStore's, with the bulk dropped inside SQLite (json_remove), which is many times faster."""
        paths = ", ".join(f"'$.{name}'" for name in RESULT_BULK)
        rows = self._rows_of(f"SELECT id, json_remove(result, {paths}) FROM jobs", job_ids,
                             where="result IS NOT NULL AND ")
        return {job_id: json.loads(doc) for job_id, doc in rows}

    def _rows_of(self, select: str, job_ids: Sequence[str], *, where: str = "") -> Iterator[Any]:
        """``select`` over the jobs among ``job_ids``, a few hundred ids per query."""
        for start in range(0, len(job_ids), 500):
            chunk = list(job_ids[start:start + 500])
            yield from self._conn().execute(f"{select} WHERE {where}id IN ({','.join('?' * len(chunk))})", chunk)

    def list_jobs(self, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        if status is None:
            rows = self._conn().execute("SELECT record, NULL FROM jobs ORDER BY created_at DESC LIMIT ?", (limit,))
        else:
            rows = self._conn().execute(
                "SELECT record, NULL FROM jobs WHERE status = ? ORDER BY created_at DESC LIMIT ?",
                (status.value, limit))
        return [_job(row) for row in rows]

    def jobs_with_status(self, status: JobStatus) -> list[Job]:
        rows = self._conn().execute("SELECT record, NULL FROM jobs WHERE status = ? ORDER BY queued_at",
                                    (status.value,))
        return [_job(row) for row in rows]

    def count(self, status: JobStatus) -> int:
        row = self._conn().execute("SELECT count(*) FROM jobs WHERE status = ?", (status.value,)).fetchone()
        return int(row[0])

    def count_active(self, token: str | None) -> int:
        row = self._conn().execute("SELECT count(*) FROM jobs WHERE token IS ? AND status IN (?, ?)",
                                   (token, *_ACTIVE)).fetchone()
        return int(row[0])

    # -- graphs and sweeps -------------------------------------------------------------------------

    def put_graph(self, sha256: str, doc: Mapping[str, Any]) -> None:
        self._conn().execute("INSERT OR IGNORE INTO graphs (sha256, doc) VALUES (?, ?)", (sha256, json.dumps(doc)))

    def get_graph(self, sha256: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT doc FROM graphs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            raise JobNotFound(sha256)
        doc: dict[str, Any] = json.loads(row[0])
        return doc

    def put_sweep(self, sweep: Sweep) -> None:
        self._conn().execute("INSERT OR IGNORE INTO sweeps (id, created_at, record) VALUES (?, ?, ?)",
                             (sweep.id, sweep.created_at, json.dumps(sweep.to_record())))

    def get_sweep(self, sweep_id: str) -> Sweep:
        row = self._conn().execute("SELECT record FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        if row is None:
            raise JobNotFound(sweep_id)
        return Sweep.from_record(json.loads(row[0]))

    def list_sweeps(self, *, limit: int = 50) -> list[Sweep]:
        rows = self._conn().execute("SELECT record FROM sweeps ORDER BY created_at DESC LIMIT ?", (limit,))
        return [Sweep.from_record(json.loads(r[0])) for r in rows]

    def ping(self) -> None:
        self._conn().execute("SELECT 1 FROM jobs LIMIT 1").fetchall()

    def close(self) -> None:
        """Close every thread's connection; a thread that uses the store again opens a new one."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._local = threading.local()


def _job(row: Sequence[Any]) -> Job:
    return Job.from_record(json.loads(row[0]), None if row[1] is None else json.loads(row[1]))
