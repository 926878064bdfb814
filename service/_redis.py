"""The cluster job store: jobs in Redis, visible to every API replica and worker.

Each job is one JSON string under ``<prefix>job:<id>`` and its result another under
``<prefix>result:<id>``; sorted sets index jobs by creation time and by status, and a set per
token holds its active jobs. A transition WATCHes the job's key and writes the record and every
index in one MULTI, so the indexes never disagree with the record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import redis

from remat.schedules import JobNotFound

from ._jobs import Job, JobStatus
from ._store import KEEP, Change, JobStore
from ._sweeps import Sweep

__all__ = ["RedisStore"]


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

    # -- jobs --------------------------------------------------------------------------------------

    def _insert(self, job: Job) -> bool:
        key = self.key_for("job", job.id)

        def insert(pipe: redis.client.Pipeline) -> bool:
            if pipe.exists(key):
                return False
            pipe.multi()
            pipe.set(key, json.dumps(job.to_record()))
            self._index(pipe, None, job)
            return True

        return bool(self.redis.transaction(insert, key, value_from_callable=True))  # type: ignore[arg-type]

    def _update(self, job_id: str, change: Change, *, result: Mapping[str, Any] | None = KEEP) -> Job | None:
        key = self.key_for("job", job_id)

        def update(pipe: redis.client.Pipeline) -> Job | None:
            raw = pipe.get(key)
            if raw is None:
                raise JobNotFound(job_id)
            old = Job.from_record(json.loads(raw))
            new = change(old)
            if new is None:
                return None
            pipe.multi()
            pipe.set(key, json.dumps(new.to_record()))
            if result is None:
                pipe.delete(self.key_for("result", job_id))
            elif result is not KEEP:
                pipe.set(self.key_for("result", job_id), json.dumps(result))
            self._index(pipe, old, new)
            return new

        updated = self.redis.transaction(update, key, value_from_callable=True)  # type: ignore[arg-type]
        return cast("Job | None", updated)

    def _index(self, pipe: redis.client.Pipeline, old: Job | None, new: Job) -> None:
        if old is not None:
            pipe.zrem(self.key_for("status", old.status.value), old.id)
            pipe.srem(self._active_key(old.token), old.id)
        pipe.zadd(self.key_for("jobs"), {new.id: new.created_at})  # a job run again counts as new
        pipe.zadd(self.key_for("status", new.status.value), {new.id: new.queued_at})
        if not new.status.terminal:
            pipe.sadd(self._active_key(new.token), new.id)

    def _active_key(self, token: str | None) -> str:
        return self.key_for("active", token or "-")

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

    def list_jobs(self, *, limit: int = 50, status: JobStatus | None = None) -> list[Job]:
        index = self.key_for("jobs") if status is None else self.key_for("status", status.value)
        return self.get_many(cast("list[str]", self.redis.zrevrange(index, 0, limit - 1)))

    def jobs_with_status(self, status: JobStatus) -> list[Job]:
        return self.get_many(cast("list[str]", self.redis.zrange(self.key_for("status", status.value), 0, -1)))

    def count(self, status: JobStatus) -> int:
        return int(self.redis.zcard(self.key_for("status", status.value)))

    def count_active(self, token: str | None) -> int:
        return int(self.redis.scard(self._active_key(token)))

    # -- graphs and sweeps -------------------------------------------------------------------------

    def put_graph(self, sha256: str, doc: Mapping[str, Any]) -> None:
        self.redis.set(self.key_for("graph", sha256), json.dumps(doc), nx=True)

    def get_graph(self, sha256: str) -> dict[str, Any]:
        raw = self.redis.get(self.key_for("graph", sha256))
        if raw is None:
            raise JobNotFound(sha256)
        doc: dict[str, Any] = json.loads(raw)
        return doc

    def put_sweep(self, sweep: Sweep) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.key_for("sweep", sweep.id), json.dumps(sweep.to_record()), nx=True)
        pipe.zadd(self.key_for("sweeps"), {sweep.id: sweep.created_at}, nx=True)
        pipe.execute()

    def get_sweep(self, sweep_id: str) -> Sweep:
        raw = self.redis.get(self.key_for("sweep", sweep_id))
        if raw is None:
            raise JobNotFound(sweep_id)
        return Sweep.from_record(json.loads(raw))

    def list_sweeps(self, *, limit: int = 50) -> list[Sweep]:
        ids = cast("list[str]", self.redis.zrevrange(self.key_for("sweeps"), 0, limit - 1))
        raws = self.redis.mget([self.key_for("sweep", i) for i in ids]) if ids else []
        return [Sweep.from_record(json.loads(r)) for r in raws if r is not None]

    def ping(self) -> None:
        self.redis.ping()

    def close(self) -> None:
        self.redis.close()
