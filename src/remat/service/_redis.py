"""The cluster job store: jobs in Redis, visible to every API replica and worker.

Keys, all under ``prefix`` and built by :meth:`RedisStore.key_for` (``<tok>`` is a token id, ``-``
without authentication)::

    job:<id>, result:<id>     the job's record and its result (JSON strings)
    jobs-of:<tok>             zset: the token's jobs by creation time (its listing)
    status:<status>           zset: jobs in each status, by queue time (counts, the reaper)
    queued-of:<tok>           zset: the token's queued jobs, by queue time (fair claims)
    active:<tok>              set: the token's queued and running jobs (its limit)
    tokens, served            the tokens that ever had a job; hash: when each was last served a job
    ended                     zset: ended jobs by end time (retention)
    cache:<key>               the job holding a reusable result of the request <key>
    graph:<sha>, graphs       a graph document; zset: graphs by last use
    graph-refs:<sha>          set: the jobs, sweeps and max-batch searches that refer to the graph
    graph-owners              hash: the token each graph is charged to (the one whose request stored it)
    usage:<tok>               hash: bytes of the token's results (``results``) and graphs (``graphs``)
    sweep:<id>, sweeps        a sweep's record; zset: sweeps by creation time
    sweeps-of:<tok>           zset: the token's sweeps; sweeps-unplanned: set of sweeps still to plan
    max-batch:<id>            a max-batch search's record
    max-batches-of:<tok>      zset: the token's searches by creation time
    max-batches-active        zset: searches that go on, by creation time
    max-batches-ended         zset: ended searches by creation time (retention)

A transition WATCHes the job's key and writes the record and every index in one MULTI, so the
indexes never disagree with the record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import redis

from remat.solvers import ResultDocument

from . import _jobs
from ._errors import JobNotFound
from ._jobs import Job, JobStatus
from ._max_batches import MaxBatchSearch
from ._store import GRAPH_GRACE_S, KEEP, Change, Expired, JobStore, Retention, SearchChange, Usage
from ._sweeps import Sweep

__all__ = ["RedisStore"]

CLAIM_TRIES = 8
"""Times claim_next picks again when another worker claimed its pick first. (docs/tuning.md)"""
SCHEMA = 3
"""Version of the key layout; ``migrate`` rebuilds the indexes of records written under an older one."""


def _tok(token: str | None) -> str:
    return token or "-"


class RedisStore(JobStore):
    """Jobs, results, graphs and sweeps in Redis under ``prefix``."""

    def __init__(self, client: redis.Redis, *, prefix: str = "remat:", **policy: Any) -> None:
        super().__init__(**policy)
        self.redis = client
        self.prefix = prefix

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStore:
        return cls(redis.Redis.from_url(url, decode_responses=True, health_check_interval=30), **kwargs)

    def key_for(self, kind: str, name: str = "") -> str:
        """The one place keys are built: ``key_for("job", id) == "remat:job:<id>"``."""
        return f"{self.prefix}{kind}:{name}" if name else f"{self.prefix}{kind}"

    def migrate(self) -> None:
        """Index records stored under an older key layout (idempotent; every replica and worker may run it)."""
        if int(self.redis.get(self.key_for("schema")) or 0) >= SCHEMA:
            return
        for key in self.redis.scan_iter(match=self.key_for("usage", "*"), count=500):
            self.redis.delete(key)  # counted again below, from the results themselves
        for key in self.redis.scan_iter(match=self.key_for("job", "*"), count=500):
            raw = self.redis.get(key)
            if raw is not None:
                job = Job.from_record(json.loads(raw))
                pipe = self.redis.pipeline(transaction=True)
                self._index(pipe, None, job)
                pipe.hincrby(self.key_for("usage", _tok(job.token)), "results",
                             int(self.redis.strlen(self.key_for("result", job.id))))
                pipe.execute()
        for key in self.redis.scan_iter(match=self.key_for("sweep", "*"), count=500):
            raw = self.redis.get(key)
            if raw is not None:
                pipe = self.redis.pipeline(transaction=True)
                self._index_sweep(pipe, Sweep.from_record(json.loads(raw)))
                pipe.execute()
        self.redis.set(self.key_for("schema"), SCHEMA)

    # -- jobs --------------------------------------------------------------------------------------

    def _insert(self, job: Job, result: ResultDocument | None = None) -> bool:
        key = self.key_for("job", job.id)

        def insert(pipe: redis.client.Pipeline) -> bool:
            if pipe.exists(key):
                return False
            pipe.multi()
            pipe.set(key, json.dumps(job.to_record()))
            if result is not None:
                text = json.dumps(result.to_json())
                pipe.set(self.key_for("result", job.id), text)
                pipe.set(self.key_for("cache", job.spec.key), job.id)
                pipe.hincrby(self.key_for("usage", _tok(job.token)), "results", len(text))
            self._index(pipe, None, job)
            return True

        return bool(self.redis.transaction(insert, key, value_from_callable=True))  # type: ignore[arg-type]

    def _update(self, job_id: str, change: Change, *, result: ResultDocument | None = KEEP) -> Job | None:
        key = self.key_for("job", job_id)

        def update(pipe: redis.client.Pipeline) -> Job | None:
            raw = pipe.get(key)
            if raw is None:
                raise JobNotFound(job_id)
            old = Job.from_record(json.loads(raw))
            new = change(old)
            if new is None:
                return None
            was = 0 if result is KEEP else int(pipe.strlen(self.key_for("result", job_id)))  # its writes WATCH `key`
            pipe.multi()
            pipe.set(key, json.dumps(new.to_record()))
            if result is None:
                pipe.delete(self.key_for("result", job_id))
            elif result is not KEEP:
                text = json.dumps(result.to_json())
                pipe.set(self.key_for("result", job_id), text)
                pipe.hincrby(self.key_for("usage", _tok(new.token)), "results", len(text))
                if _jobs.reusable(new):
                    pipe.set(self.key_for("cache", new.spec.key), new.id)
            if was:
                pipe.hincrby(self.key_for("usage", _tok(new.token)), "results", -was)
            self._index(pipe, old, new)
            return new

        updated = self.redis.transaction(update, key, value_from_callable=True)  # type: ignore[arg-type]
        return cast("Job | None", updated)

    def _index(self, pipe: redis.client.Pipeline, old: Job | None, new: Job) -> None:
        tok = _tok(new.token)
        if old is None:
            pipe.sadd(self.key_for("graph-refs", new.spec.graph_sha256), f"job:{new.id}")
            pipe.sadd(self.key_for("tokens"), tok)
        else:
            pipe.zrem(self.key_for("status", old.status.value), old.id)
            pipe.zrem(self.key_for("queued-of", _tok(old.token)), old.id)
            pipe.srem(self.key_for("active", _tok(old.token)), old.id)
            pipe.zrem(self.key_for("ended"), old.id)
        pipe.zadd(self.key_for("jobs-of", tok), {new.id: new.created_at})  # a job run again counts as new
        pipe.zadd(self.key_for("status", new.status.value), {new.id: new.queued_at})
        if new.status is JobStatus.QUEUED:
            pipe.zadd(self.key_for("queued-of", tok), {new.id: new.queued_at})
        if new.status.terminal:
            pipe.zadd(self.key_for("ended"), {new.id: new.finished_at or new.created_at})
        else:
            pipe.sadd(self.key_for("active", tok), new.id)

    def _cached_job(self, key: str) -> str | None:
        return cast("str | None", self.redis.get(self.key_for("cache", key)))

    def claim_next(self, owner: str) -> Job | None:
        for _ in range(CLAIM_TRIES):
            pick = self._fair_pick()
            if pick is None:
                return None
            job_id, tok = pick
            try:
                job = self.mark_running(job_id, owner)
            except JobNotFound:  # an index older than its record's deletion: drop it
                self.redis.zrem(self.key_for("queued-of", tok), job_id)
                continue
            if job is not None:
                self.redis.hset(self.key_for("served"), tok, self.clock())
                return job
        return None

    def _fair_pick(self) -> tuple[str, str] | None:
        """(job id, token) of the next job by the fair order: one round trip over every token's queue head."""
        tokens = sorted(cast("set[str]", self.redis.smembers(self.key_for("tokens"))))
        pipe = self.redis.pipeline(transaction=False)
        for tok in tokens:
            pipe.zrange(self.key_for("queued-of", tok), 0, 0, withscores=True)
            pipe.scard(self.key_for("active", tok))
            pipe.zcard(self.key_for("queued-of", tok))
        pipe.hgetall(self.key_for("served"))
        *heads, served = pipe.execute()
        best: tuple[tuple[int, float, float], str, str] | None = None
        for i, tok in enumerate(tokens):
            head, active, queued = heads[3 * i:3 * i + 3]
            if not head:
                continue
            job_id, queued_at = head[0]
            rank = (active - queued, float(served.get(tok, 0.0)), queued_at)
            if best is None or rank < best[0]:
                best = (rank, job_id, tok)
        return None if best is None else (best[1], best[2])

    def get(self, job_id: str, *, with_result: bool = True) -> Job:
        found = self.get_many([job_id], with_result=with_result)
        if not found:
            raise JobNotFound(job_id)
        return found[0]

    def get_many(self, job_ids: Sequence[str], *, with_result: bool = False) -> list[Job]:
        if not job_ids:
            return []
        records = self.redis.mget([self.key_for("job", i) for i in job_ids])
        results = (self.redis.mget([self.key_for("result", i) for i in job_ids]) if with_result
                   else [None] * len(job_ids))
        return [Job.from_record(json.loads(rec), None if res is None else json.loads(res))
                for rec, res in zip(records, results, strict=True) if rec is not None]

    def list_jobs(self, token: str | None, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        index = self.key_for("jobs-of", _tok(token))
        found: list[Job] = []
        start = 0
        while len(found) < limit:
            ids = cast("list[str]", self.redis.zrevrange(index, start, start + 4 * limit - 1))
            if not ids:
                break
            found += [j for j in self.get_many(ids) if status is None or j.status is status]
            start += len(ids)
        return found[:limit]

    def jobs_with_status(self, status: JobStatus) -> list[Job]:
        return self.get_many(cast("list[str]", self.redis.zrange(self.key_for("status", status.value), 0, -1)))

    def count(self, status: JobStatus) -> int:
        return int(self.redis.zcard(self.key_for("status", status.value)))

    def count_active(self, token: str | None) -> int:
        return int(self.redis.scard(self.key_for("active", _tok(token))))

    # -- graphs and sweeps -------------------------------------------------------------------------

    def put_graph(self, sha256: str, doc: Mapping[str, Any], *, token: str | None = None) -> None:
        key = self.key_for("graph", sha256)

        def put(pipe: redis.client.Pipeline) -> None:
            stored = pipe.exists(key)
            pipe.multi()
            pipe.zadd(self.key_for("graphs"), {sha256: self.clock()})
            if not stored:
                text = json.dumps(doc)
                pipe.set(key, text)
                pipe.hset(self.key_for("graph-owners"), sha256, _tok(token))
                pipe.hincrby(self.key_for("usage", _tok(token)), "graphs", len(text))

        self.redis.transaction(put, key)

    def has_graph(self, sha256: str) -> bool:
        return bool(self.redis.exists(self.key_for("graph", sha256)))

    def usage(self, token: str | None) -> Usage:
        results, graphs = self.redis.hmget(self.key_for("usage", _tok(token)), ["results", "graphs"])
        return Usage(int(results or 0), int(graphs or 0))

    def get_graph(self, sha256: str) -> dict[str, Any]:
        raw = self.redis.get(self.key_for("graph", sha256))
        if raw is None:
            raise JobNotFound(sha256)
        doc: dict[str, Any] = json.loads(raw)
        return doc

    def put_sweep(self, sweep: Sweep) -> None:
        key = self.key_for("sweep", sweep.id)

        def insert(pipe: redis.client.Pipeline) -> None:
            if pipe.exists(key):
                return
            pipe.multi()
            pipe.set(key, json.dumps(sweep.to_record()))
            self._index_sweep(pipe, sweep)

        self.redis.transaction(insert, key)

    def _index_sweep(self, pipe: redis.client.Pipeline, sweep: Sweep) -> None:
        pipe.zadd(self.key_for("sweeps"), {sweep.id: sweep.created_at})
        pipe.zadd(self.key_for("sweeps-of", _tok(sweep.token)), {sweep.id: sweep.created_at})
        pipe.sadd(self.key_for("graph-refs", sweep.graph_sha256), f"sweep:{sweep.id}")
        if not sweep.planned:
            pipe.sadd(self.key_for("sweeps-unplanned"), sweep.id)

    def replace_sweep(self, sweep: Sweep) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.key_for("sweep", sweep.id), json.dumps(sweep.to_record()), xx=True)
        if sweep.planned:
            pipe.srem(self.key_for("sweeps-unplanned"), sweep.id)
        pipe.execute()

    def get_sweep(self, sweep_id: str) -> Sweep:
        raw = self.redis.get(self.key_for("sweep", sweep_id))
        if raw is None:
            raise JobNotFound(sweep_id)
        return Sweep.from_record(json.loads(raw))

    def list_sweeps(self, token: str | None, *, limit: int = 50) -> list[Sweep]:
        return self._sweeps(cast("list[str]", self.redis.zrevrange(self.key_for("sweeps-of", _tok(token)), 0,
                                                                    limit - 1)))

    def unplanned_sweeps(self) -> list[Sweep]:
        return self._sweeps(sorted(cast("set[str]", self.redis.smembers(self.key_for("sweeps-unplanned")))))

    def _sweeps(self, ids: Sequence[str]) -> list[Sweep]:
        raws = self.redis.mget([self.key_for("sweep", i) for i in ids]) if ids else []
        return [Sweep.from_record(json.loads(r)) for r in raws if r is not None]

    # -- max-batch searches ------------------------------------------------------------------------

    def insert_max_batch(self, search: MaxBatchSearch) -> bool:
        key = self.key_for("max-batch", search.id)

        def insert(pipe: redis.client.Pipeline) -> bool:
            if pipe.exists(key):
                return False
            pipe.multi()
            pipe.set(key, json.dumps(search.to_record()))
            pipe.zadd(self.key_for("max-batches-of", _tok(search.token)), {search.id: search.created_at})
            for _, sha in search.graphs:
                pipe.sadd(self.key_for("graph-refs", sha), f"max-batch:{search.id}")
            self._index_max_batch(pipe, search)
            return True

        return bool(self.redis.transaction(insert, key, value_from_callable=True))  # type: ignore[arg-type]

    def _index_max_batch(self, pipe: redis.client.Pipeline, search: MaxBatchSearch) -> None:
        ended, active = self.key_for("max-batches-ended"), self.key_for("max-batches-active")
        pipe.zadd(ended if search.ended else active, {search.id: search.created_at})
        pipe.zrem(active if search.ended else ended, search.id)

    def update_max_batch(self, search_id: str, change: SearchChange) -> MaxBatchSearch | None:
        key = self.key_for("max-batch", search_id)

        def update(pipe: redis.client.Pipeline) -> MaxBatchSearch | None:
            raw = pipe.get(key)
            if raw is None:
                raise JobNotFound(search_id)
            new = change(MaxBatchSearch.from_record(json.loads(raw)))
            if new is None:
                return None
            pipe.multi()
            pipe.set(key, json.dumps(new.to_record()))
            pipe.zadd(self.key_for("max-batches-of", _tok(new.token)), {new.id: new.created_at})
            self._index_max_batch(pipe, new)
            return new

        updated = self.redis.transaction(update, key, value_from_callable=True)  # type: ignore[arg-type]
        return cast("MaxBatchSearch | None", updated)

    def get_max_batch(self, search_id: str) -> MaxBatchSearch:
        found = self._max_batches([search_id])
        if not found:
            raise JobNotFound(search_id)
        return found[0]

    def list_max_batches(self, token: str | None, *, limit: int = 50) -> list[MaxBatchSearch]:
        index = self.key_for("max-batches-of", _tok(token))
        return self._max_batches(cast("list[str]", self.redis.zrevrange(index, 0, limit - 1)))

    def active_max_batches(self) -> list[MaxBatchSearch]:
        return self._max_batches(cast("list[str]", self.redis.zrange(self.key_for("max-batches-active"), 0, -1)))

    def _max_batches(self, ids: Sequence[str]) -> list[MaxBatchSearch]:
        raws = self.redis.mget([self.key_for("max-batch", i) for i in ids]) if ids else []
        return [MaxBatchSearch.from_record(json.loads(r)) for r in raws if r is not None]

    # -- retention ---------------------------------------------------------------------------------

    def expire(self, retention: Retention) -> Expired:
        now = self.clock()
        cutoff = now - retention.max_age_s
        jobs = sum(self._delete_job(job_id) for job_id in self._beyond(self.key_for("ended"), cutoff,
                                                                          retention.max_jobs))
        sweeps = sum(self._delete_sweep(sweep_id) for sweep_id in self._beyond(self.key_for("sweeps"), cutoff,
                                                                                  retention.max_sweeps))
        searches = sum(self._delete_max_batch(search_id) for search_id in self._beyond(
            self.key_for("max-batches-ended"), cutoff, retention.max_sweeps))
        grace = now - min(GRAPH_GRACE_S, retention.max_age_s)
        unused = cast("list[str]", self.redis.zrangebyscore(self.key_for("graphs"), "-inf", f"({grace}"))
        return Expired(jobs, sweeps, sum(self._delete_graph(sha) for sha in unused), searches)

    def _beyond(self, index: str, cutoff: float, keep: int) -> set[str]:
        """Members of the time-scored ``index`` older than ``cutoff``, or beyond its newest ``keep``."""
        old = set(cast("list[str]", self.redis.zrangebyscore(index, "-inf", f"({cutoff}")))
        surplus = int(self.redis.zcard(index)) - keep
        return old | set(cast("list[str]", self.redis.zrange(index, 0, surplus - 1))) if surplus > 0 else old

    def _delete_job(self, job_id: str) -> bool:
        """Delete an ended job with its result, index entries and cache entry; False if it is running again."""
        key = self.key_for("job", job_id)

        def delete(pipe: redis.client.Pipeline) -> bool:
            raw = pipe.get(key)
            if raw is None:
                pipe.multi()
                pipe.zrem(self.key_for("ended"), job_id)
                return False
            job = Job.from_record(json.loads(raw))
            if not job.status.terminal:
                return False
            cache = self.key_for("cache", job.spec.key)
            pipe.watch(cache)
            cached_here = pipe.get(cache) == job_id
            size = int(pipe.strlen(self.key_for("result", job_id)))
            pipe.multi()
            pipe.delete(key, self.key_for("result", job_id), *([cache] if cached_here else []))
            if size:
                pipe.hincrby(self.key_for("usage", _tok(job.token)), "results", -size)
            pipe.zrem(self.key_for("ended"), job_id)
            pipe.zrem(self.key_for("status", job.status.value), job_id)
            pipe.zrem(self.key_for("jobs-of", _tok(job.token)), job_id)
            pipe.srem(self.key_for("graph-refs", job.spec.graph_sha256), f"job:{job_id}")
            return True

        return bool(self.redis.transaction(delete, key, value_from_callable=True))  # type: ignore[arg-type]

    def _delete_sweep(self, sweep_id: str) -> bool:
        raw = self.redis.get(self.key_for("sweep", sweep_id))
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.key_for("sweep", sweep_id))
        pipe.zrem(self.key_for("sweeps"), sweep_id)
        pipe.srem(self.key_for("sweeps-unplanned"), sweep_id)
        if raw is not None:
            sweep = Sweep.from_record(json.loads(raw))
            pipe.zrem(self.key_for("sweeps-of", _tok(sweep.token)), sweep_id)
            pipe.srem(self.key_for("graph-refs", sweep.graph_sha256), f"sweep:{sweep_id}")
        pipe.execute()
        return raw is not None

    def _delete_max_batch(self, search_id: str) -> bool:
        """Delete an ended search and its index entries; False if it is gone, or goes on again (run afresh)."""
        key = self.key_for("max-batch", search_id)

        def delete(pipe: redis.client.Pipeline) -> bool:
            raw = pipe.get(key)
            search = MaxBatchSearch.from_record(json.loads(raw)) if raw is not None else None
            if search is not None and not search.ended:
                return False
            pipe.multi()
            pipe.zrem(self.key_for("max-batches-ended"), search_id)
            if search is None:
                return False
            pipe.delete(key)
            pipe.zrem(self.key_for("max-batches-of", _tok(search.token)), search_id)
            for _, sha in search.graphs:
                pipe.srem(self.key_for("graph-refs", sha), f"max-batch:{search_id}")
            return True

        return bool(self.redis.transaction(delete, key, value_from_callable=True))  # type: ignore[arg-type]

    def _delete_graph(self, sha256: str) -> bool:
        """Delete a graph no job or sweep refers to; a reference added meanwhile aborts it (WATCH)."""
        refs = self.key_for("graph-refs", sha256)

        def delete(pipe: redis.client.Pipeline) -> bool:
            if pipe.scard(refs):
                return False
            owner = cast("str | None", pipe.hget(self.key_for("graph-owners"), sha256))
            size = int(pipe.strlen(self.key_for("graph", sha256)))
            pipe.multi()
            pipe.delete(self.key_for("graph", sha256))
            pipe.zrem(self.key_for("graphs"), sha256)
            if owner is not None:
                pipe.hdel(self.key_for("graph-owners"), sha256)
                pipe.hincrby(self.key_for("usage", owner), "graphs", -size)
            return True

        return bool(self.redis.transaction(delete, refs, value_from_callable=True))  # type: ignore[arg-type]

    def ping(self) -> None:
        self.redis.ping()

    def close(self) -> None:
        self.redis.close()
