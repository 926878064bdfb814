"""The embedded job store: one SQLite file in WAL mode, shared safely by threads and processes."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from remat.solvers import RESULT_BULK, ResultDocument

from . import _jobs
from ._errors import JobNotFound
from ._jobs import Job, JobStatus
from ._max_batches import MaxBatchSearch
from ._store import GRAPH_GRACE_S, KEEP, Change, Expired, JobStore, Retention, SearchChange, Usage
from ._sweeps import Sweep

__all__ = ["SqliteStore"]

_MIGRATIONS = (
    """
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
    CREATE INDEX IF NOT EXISTS sweeps_by_created ON sweeps (created_at)
    """,
    # 2: tenancy (jobs and sweeps listed per token), the shared result cache, fair claims, retention.
    """
    ALTER TABLE jobs ADD COLUMN graph TEXT GENERATED ALWAYS AS (json_extract(record, '$.spec.graph_sha256')) VIRTUAL;
    ALTER TABLE jobs ADD COLUMN finished_at REAL GENERATED ALWAYS AS (json_extract(record, '$.finished_at')) VIRTUAL;
    CREATE INDEX jobs_of_token ON jobs (token, created_at);
    CREATE INDEX jobs_by_graph ON jobs (graph);
    CREATE INDEX jobs_by_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
    ALTER TABLE sweeps ADD COLUMN token TEXT GENERATED ALWAYS AS (json_extract(record, '$.token')) VIRTUAL;
    ALTER TABLE sweeps ADD COLUMN graph TEXT GENERATED ALWAYS AS (json_extract(record, '$.graph_sha256')) VIRTUAL;
    ALTER TABLE sweeps ADD COLUMN planned INTEGER
        GENERATED ALWAYS AS (coalesce(json_extract(record, '$.planned'), 1)) VIRTUAL;
    CREATE INDEX sweeps_of_token ON sweeps (token, created_at);
    CREATE INDEX sweeps_by_graph ON sweeps (graph);
    CREATE INDEX sweeps_unplanned ON sweeps (planned) WHERE planned = 0;
    ALTER TABLE graphs ADD COLUMN used_at REAL NOT NULL DEFAULT 0;
    CREATE TABLE cache (key TEXT PRIMARY KEY, job_id TEXT NOT NULL);
    CREATE TABLE served (token TEXT PRIMARY KEY, at REAL NOT NULL)
    """,
    # 3: max-batch searches, and the graphs each one reads (kept while it is).
    """
    CREATE TABLE max_batches (
        id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        record TEXT NOT NULL,
        token TEXT GENERATED ALWAYS AS (json_extract(record, '$.token')) VIRTUAL,
        finished_at REAL GENERATED ALWAYS AS (json_extract(record, '$.finished_at')) VIRTUAL
    );
    CREATE INDEX max_batches_of_token ON max_batches (token, created_at);
    CREATE INDEX max_batches_active ON max_batches (created_at) WHERE finished_at IS NULL;
    CREATE TABLE max_batch_graphs (id TEXT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (id, sha256));
    CREATE INDEX max_batch_graphs_by_graph ON max_batch_graphs (sha256)
    """,
    # 4: what each token's results and graphs take (per-token store quotas).
    """
    ALTER TABLE jobs ADD COLUMN result_bytes INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET result_bytes = length(CAST(result AS BLOB)) WHERE result IS NOT NULL;
    ALTER TABLE graphs ADD COLUMN token TEXT;
    ALTER TABLE graphs ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
    UPDATE graphs SET bytes = length(CAST(doc AS BLOB));
    CREATE INDEX jobs_result_bytes ON jobs (token, result_bytes);
    CREATE INDEX graphs_bytes ON graphs (token, bytes)
    """,
)
"""Schema changes in order; ``PRAGMA user_version`` says how many a file has had."""

_ACTIVE = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
_ENDED = tuple(s.value for s in JobStatus if s.terminal)
_FAIR_NEXT = """
SELECT q.id FROM jobs AS q
LEFT JOIN (SELECT coalesce(token, '') AS t, count(*) AS n FROM jobs WHERE status = 'running' GROUP BY t) AS r
    ON r.t = coalesce(q.token, '')
LEFT JOIN served AS s ON s.token = coalesce(q.token, '')
WHERE q.status = 'queued'
ORDER BY coalesce(r.n, 0), coalesce(s.at, 0), q.queued_at
LIMIT 1
"""
"""The next job to claim: of the token with the fewest running jobs, then served longest ago; its oldest."""
_EXPIRED_JOBS = f"""
SELECT id FROM jobs WHERE status IN ({",".join("?" * len(_ENDED))}) AND finished_at < ?
UNION
SELECT id FROM (SELECT id FROM jobs WHERE status IN ({",".join("?" * len(_ENDED))})
                ORDER BY finished_at DESC LIMIT -1 OFFSET ?)
"""


class SqliteStore(JobStore):
    """Jobs in ``<data_dir>/jobs.sqlite3``; every transition is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str | Path, **policy: Any) -> None:
        super().__init__(**policy)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.migrate()
        self.check_writable()

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

    def migrate(self) -> None:
        """Bring the file's schema up to date, one migration per transaction (a no-op once it is)."""
        if self._conn().execute("PRAGMA user_version").fetchone()[0] >= len(_MIGRATIONS):
            return
        for number, script in enumerate(_MIGRATIONS, start=1):
            with self._immediate() as conn:
                if conn.execute("PRAGMA user_version").fetchone()[0] >= number:
                    continue
                for statement in script.split(";"):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")

    def check_writable(self) -> None:
        """Write the file's schema version again (no change): sqlite3.OperationalError now, not at the first job, when
        it is read-only (with its schema up to date, nothing else would have written)."""
        with self._immediate() as conn:
            conn.execute(f"PRAGMA user_version = {conn.execute('PRAGMA user_version').fetchone()[0]}")

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

    # -- jobs --------------------------------------------------------------------------------------

    def _insert(self, job: Job, result: ResultDocument | None = None) -> bool:
        text = None if result is None else json.dumps(result.to_json())
        with self._immediate() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO jobs (id, status, token, created_at, queued_at, record, result, result_bytes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (job.id, job.status.value, job.token, job.created_at, job.queued_at, json.dumps(job.to_record()),
                 text, _size(text)))
            if cur.rowcount == 1 and result is not None:
                self._cache(conn, job)
            return cur.rowcount == 1

    def _update(self, job_id: str, change: Change, *, result: ResultDocument | None = KEEP) -> Job | None:
        with self._immediate() as conn:
            return self._apply(conn, job_id, change, result)

    def _apply(self, conn: sqlite3.Connection, job_id: str, change: Change,
               result: ResultDocument | None) -> Job | None:
        row = conn.execute("SELECT record FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        new = change(Job.from_record(json.loads(row[0])))
        if new is None:
            return None
        conn.execute("UPDATE jobs SET status = ?, token = ?, created_at = ?, queued_at = ?, record = ? WHERE id = ?",
                     (new.status.value, new.token, new.created_at, new.queued_at, json.dumps(new.to_record()), job_id))
        if result is not KEEP:
            text = None if result is None else json.dumps(result.to_json())
            conn.execute("UPDATE jobs SET result = ?, result_bytes = ? WHERE id = ?", (text, _size(text), job_id))
            if result is not None and _jobs.reusable(new):
                self._cache(conn, new)
        return new

    @staticmethod
    def _cache(conn: sqlite3.Connection, job: Job) -> None:
        conn.execute("INSERT INTO cache (key, job_id) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET job_id = "
                     "excluded.job_id", (job.spec.key, job.id))

    def _cached_job(self, key: str) -> str | None:
        row = self._conn().execute("SELECT job_id FROM cache WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def claim_next(self, owner: str) -> Job | None:
        with self._immediate() as conn:
            row = conn.execute(_FAIR_NEXT).fetchone()
            if row is None:
                return None
            now = self.clock()
            job = self._apply(conn, row[0], lambda j: _jobs.claim(j, owner=owner, now=now, lease_s=self.lease_s),
                              KEEP)
            if job is not None:
                conn.execute("INSERT INTO served (token, at) VALUES (?, ?) ON CONFLICT (token) DO UPDATE SET "
                             "at = excluded.at", (job.token or "", now))
            return job

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

    def result_summaries(self, job_ids: Sequence[str]) -> dict[str, ResultDocument]:
        """As JobStore's, with the bulk dropped inside SQLite (json_remove), which is many times faster."""
        paths = ", ".join(f"'$.{name}'" for name in RESULT_BULK)
        rows = self._rows_of(f"SELECT id, json_remove(result, {paths}) FROM jobs", job_ids,
                             where="result IS NOT NULL AND ")
        return {job_id: ResultDocument.from_json(json.loads(doc), summary=True) for job_id, doc in rows}

    def _rows_of(self, select: str, job_ids: Sequence[str], *, where: str = "") -> Iterator[Any]:
        """``select`` over the jobs among ``job_ids``, a few hundred ids per query."""
        for start in range(0, len(job_ids), 500):
            chunk = list(job_ids[start:start + 500])
            yield from self._conn().execute(f"{select} WHERE {where}id IN ({','.join('?' * len(chunk))})", chunk)

    def list_jobs(self, token: str | None, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        if status is None:
            rows = self._conn().execute(
                "SELECT record, NULL FROM jobs WHERE token IS ? ORDER BY created_at DESC LIMIT ?", (token, limit))
        else:
            rows = self._conn().execute(
                "SELECT record, NULL FROM jobs WHERE token IS ? AND status = ? ORDER BY created_at DESC LIMIT ?",
                (token, status.value, limit))
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

    def put_graph(self, sha256: str, doc: Mapping[str, Any], *, token: str | None = None) -> None:
        conn = self._conn()
        if conn.execute("UPDATE graphs SET used_at = ? WHERE sha256 = ?", (self.clock(), sha256)).rowcount == 0:
            text = json.dumps(doc)
            conn.execute("INSERT OR IGNORE INTO graphs (sha256, doc, used_at, token, bytes) VALUES (?, ?, ?, ?, ?)",
                         (sha256, text, self.clock(), token, _size(text)))

    def has_graph(self, sha256: str) -> bool:
        return self._conn().execute("SELECT 1 FROM graphs WHERE sha256 = ?", (sha256,)).fetchone() is not None

    def usage(self, token: str | None) -> Usage:
        conn = self._conn()
        results = conn.execute("SELECT coalesce(sum(result_bytes), 0) FROM jobs WHERE token IS ?", (token,))
        graphs = conn.execute("SELECT coalesce(sum(bytes), 0) FROM graphs WHERE token IS ?", (token,))
        return Usage(int(results.fetchone()[0]), int(graphs.fetchone()[0]))

    def get_graph(self, sha256: str) -> dict[str, Any]:
        row = self._conn().execute("SELECT doc FROM graphs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None:
            raise JobNotFound(sha256)
        doc: dict[str, Any] = json.loads(row[0])
        return doc

    def put_sweep(self, sweep: Sweep) -> None:
        self._conn().execute("INSERT OR IGNORE INTO sweeps (id, created_at, record) VALUES (?, ?, ?)",
                             (sweep.id, sweep.created_at, json.dumps(sweep.to_record())))

    def replace_sweep(self, sweep: Sweep) -> None:
        self._conn().execute("UPDATE sweeps SET record = ? WHERE id = ?", (json.dumps(sweep.to_record()), sweep.id))

    def get_sweep(self, sweep_id: str) -> Sweep:
        row = self._conn().execute("SELECT record FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        if row is None:
            raise JobNotFound(sweep_id)
        return Sweep.from_record(json.loads(row[0]))

    def list_sweeps(self, token: str | None, *, limit: int = 50) -> list[Sweep]:
        rows = self._conn().execute("SELECT record FROM sweeps WHERE token IS ? ORDER BY created_at DESC LIMIT ?",
                                    (token, limit))
        return [Sweep.from_record(json.loads(r[0])) for r in rows]

    def unplanned_sweeps(self) -> list[Sweep]:
        rows = self._conn().execute("SELECT record FROM sweeps WHERE planned = 0 ORDER BY created_at")
        return [Sweep.from_record(json.loads(r[0])) for r in rows]

    # -- max-batch searches ------------------------------------------------------------------------

    def insert_max_batch(self, search: MaxBatchSearch) -> bool:
        with self._immediate() as conn:
            cur = conn.execute("INSERT OR IGNORE INTO max_batches (id, created_at, record) VALUES (?, ?, ?)",
                               (search.id, search.created_at, json.dumps(search.to_record())))
            if cur.rowcount == 1:
                conn.executemany("INSERT OR IGNORE INTO max_batch_graphs (id, sha256) VALUES (?, ?)",
                                 [(search.id, sha) for _, sha in search.graphs])
            return cur.rowcount == 1

    def update_max_batch(self, search_id: str, change: SearchChange) -> MaxBatchSearch | None:
        with self._immediate() as conn:
            new = change(self.get_max_batch(search_id))
            if new is not None:
                conn.execute("UPDATE max_batches SET created_at = ?, record = ? WHERE id = ?",
                             (new.created_at, json.dumps(new.to_record()), search_id))
            return new

    def get_max_batch(self, search_id: str) -> MaxBatchSearch:
        row = self._conn().execute("SELECT record FROM max_batches WHERE id = ?", (search_id,)).fetchone()
        if row is None:
            raise JobNotFound(search_id)
        return MaxBatchSearch.from_record(json.loads(row[0]))

    def list_max_batches(self, token: str | None, *, limit: int = 50) -> list[MaxBatchSearch]:
        rows = self._conn().execute(
            "SELECT record FROM max_batches WHERE token IS ? ORDER BY created_at DESC LIMIT ?", (token, limit))
        return [MaxBatchSearch.from_record(json.loads(r[0])) for r in rows]

    def active_max_batches(self) -> list[MaxBatchSearch]:
        rows = self._conn().execute("SELECT record FROM max_batches WHERE finished_at IS NULL ORDER BY created_at")
        return [MaxBatchSearch.from_record(json.loads(r[0])) for r in rows]

    # -- retention ---------------------------------------------------------------------------------

    def expire(self, retention: Retention) -> Expired:
        now = self.clock()
        cutoff = now - retention.max_age_s
        conn = self._conn()
        doomed = [r[0] for r in conn.execute(_EXPIRED_JOBS, (*_ENDED, cutoff, *_ENDED, retention.max_jobs))]
        jobs = 0
        for start in range(0, len(doomed), 500):
            chunk = doomed[start:start + 500]
            marks = ",".join("?" * len(chunk))
            with self._immediate() as conn:  # a job run again since it was chosen is queued: the status keeps it
                conn.execute(f"DELETE FROM cache WHERE job_id IN ({marks})", chunk)
                jobs += conn.execute(f"DELETE FROM jobs WHERE id IN ({marks}) AND status IN "
                                     f"({','.join('?' * len(_ENDED))})", (*chunk, *_ENDED)).rowcount
        with self._immediate() as conn:
            sweeps = conn.execute(
                "DELETE FROM sweeps WHERE created_at < ? OR id IN (SELECT id FROM sweeps ORDER BY created_at DESC "
                "LIMIT -1 OFFSET ?)", (cutoff, retention.max_sweeps)).rowcount
            searches = conn.execute(
                "DELETE FROM max_batches WHERE finished_at IS NOT NULL AND (created_at < ? OR id IN (SELECT id FROM "
                "max_batches WHERE finished_at IS NOT NULL ORDER BY created_at DESC LIMIT -1 OFFSET ?))",
                (cutoff, retention.max_sweeps)).rowcount
            conn.execute("DELETE FROM max_batch_graphs WHERE id NOT IN (SELECT id FROM max_batches)")
            graphs = conn.execute(
                "DELETE FROM graphs WHERE used_at < ? AND NOT EXISTS (SELECT 1 FROM jobs WHERE graph = sha256) "
                "AND NOT EXISTS (SELECT 1 FROM sweeps WHERE graph = sha256) "
                "AND NOT EXISTS (SELECT 1 FROM max_batch_graphs AS m WHERE m.sha256 = graphs.sha256)",
                (now - min(GRAPH_GRACE_S, retention.max_age_s),)).rowcount
        return Expired(jobs, sweeps, graphs, searches)

    def ping(self) -> None:
        self._conn().execute("SELECT 1 FROM jobs LIMIT 1").fetchall()

    def close(self) -> None:
        """Close every thread's connection; a thread that uses the store again opens a new one."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._local = threading.local()


def _size(text: str | None) -> int:
    """Bytes of JSON ``text`` as stored (json.dumps escapes everything but ASCII: a byte a character); 0 for none."""
    return 0 if text is None else len(text)


def _job(row: Sequence[Any]) -> Job:
    return Job.from_record(json.loads(row[0]), None if row[1] is None else json.loads(row[1]))
