"""Job ids, reuse of results, and the state transitions, as pure functions."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace

from factories import result_document

from remat.schedules import Transfer
from remat.service import Claim, JobStatus, SolveSpec, reusable
from remat.service import _jobs as jobs

SPEC = SolveSpec("a" * 64, 1000, "checkpoint-all")


def test_identical_requests_share_an_id_and_any_difference_changes_it():
    assert SolveSpec("a" * 64, 1000, "checkpoint-all").key == SPEC.key
    variants = [replace(SPEC, budget=1001), replace(SPEC, strategy="checkpoint-last"), replace(SPEC, backend="highs"),
                replace(SPEC, time_limit_s=61.0), replace(SPEC, mip_gap=0.01), replace(SPEC, graph_sha256="b" * 64)]
    assert len({v.key for v in variants} | {SPEC.key}) == len(variants) + 1
    assert replace(SPEC, time_limit_s=60).key == replace(SPEC, time_limit_s=60.0).key


def test_transfer_and_host_budget_are_part_of_the_key_only_when_given():
    canon = {"format": jobs.JOB_FORMAT, "remat": jobs.remat_version(), "graph_sha256": "a" * 64, "budget": 1000,
             "strategy": "checkpoint-all", "backend": "auto", "time_limit_s": 60.0, "mip_gap": SPEC.mip_gap,
             "options": {}}
    text = json.dumps(canon, sort_keys=True, separators=(",", ":"))
    assert SPEC.key == hashlib.sha256(text.encode()).hexdigest(), "a request without them keeps its key"
    offloading = replace(SPEC, transfer={"bandwidth": 4.0, "latency": 0.0})
    variants = [offloading, replace(offloading, transfer={"bandwidth": 4.0, "latency": 1.0}),
                replace(offloading, host_budget=0), replace(SPEC, host_budget=0)]
    assert len({v.key for v in variants} | {SPEC.key}) == len(variants) + 1
    assert offloading.transfer_params == Transfer(bandwidth=4.0) and SPEC.transfer_params is None


def _finished(result_status: str, strategy: str = "checkpoint-all") -> jobs.Job:
    job = jobs.claim(jobs.new_job(replace(SPEC, strategy=strategy), graph_name="g", token=None, now=1.0),
                     owner="o", now=2.0, lease_s=10)
    assert job is not None
    done = jobs.finish(job, Claim(job.id, "o", 1), now=3.0, result=result_document(status=result_status))
    assert done is not None
    return done


def test_reuse_proofs_and_deterministic_heuristics_but_not_time_limited_incumbents():
    assert reusable(_finished("feasible", "checkpoint-all"))
    assert reusable(_finished("over_budget", "checkpoint-last"))
    assert not reusable(_finished("timeout", "checkpoint-all"))
    assert _finished("cancelled").status is JobStatus.CANCELLED
    assert _finished("error").status is JobStatus.FAILED
    assert not reusable(_finished("feasible", "no-such-strategy"))


def test_a_runner_that_lost_its_claim_can_no_longer_change_the_job():
    queued = jobs.new_job(SPEC, graph_name="g", token=None, now=1.0)
    running = jobs.claim(queued, owner="o", now=2.0, lease_s=10)
    assert running is not None and running.attempts == 1
    assert jobs.claim(running, owner="p", now=2.0, lease_s=10) is None
    stale = Claim(SPEC.key, "o", 0)
    assert jobs.renew(running, stale, now=3.0, lease_s=10) is None
    assert jobs.finish(running, stale, now=3.0, result=result_document()) is None
    assert jobs.renew(running, Claim(SPEC.key, "o", 1), now=3.0, lease_s=10).lease_until == 13.0


def test_a_lost_job_is_queued_again_until_its_attempts_run_out():
    running = jobs.claim(jobs.new_job(SPEC, graph_name="g", token=None, now=1.0), owner="h:1:s", now=2.0, lease_s=1)
    assert jobs.lose(running, now=2.5, lease_s=1, max_attempts=2) is None  # lease still valid, owner elsewhere
    again = jobs.lose(running, now=5.0, lease_s=1, max_attempts=2)
    assert again.status is JobStatus.QUEUED and again.attempts == 1 and "queued again" in again.history[-1]
    second = jobs.claim(again, owner="h:1:s", now=6.0, lease_s=1)
    failed = jobs.lose(second, now=9.0, lease_s=1, max_attempts=2)
    assert failed.status is JobStatus.FAILED and "attempt 2 of 2" in failed.error


def test_an_owner_here_is_lost_when_its_process_is_gone_or_after_several_missed_leases():
    me = jobs.owner_name("slot0")
    dead = me.replace(f":{os.getpid()}:", ":999999999:")
    assert jobs.owner_here(me) is True and jobs.owner_here(dead) is False
    assert jobs.owner_here("some-other-host:1:slot0") is None
    running = jobs.claim(jobs.new_job(SPEC, graph_name="g", token=None, now=1.0), owner=me, now=2.0, lease_s=1)
    assert jobs.lost_reason(running, now=5.0, lease_s=1) is None  # slow, not gone: 4 more leases
    assert "stopped renewing" in jobs.lost_reason(running, now=8.0, lease_s=1)
    assert "exited" in jobs.lost_reason(replace(running, owner=dead), now=2.5, lease_s=1)


def test_cancel_ends_a_queued_job_and_flags_a_running_one():
    queued = jobs.new_job(SPEC, graph_name="g", token=None, now=1.0)
    assert jobs.request_cancel(queued, now=2.0).status is JobStatus.CANCELLED
    running = jobs.claim(queued, owner="o", now=2.0, lease_s=10)
    flagged = jobs.request_cancel(running, now=3.0)
    assert flagged.status is JobStatus.RUNNING and flagged.cancel_requested
    assert jobs.request_cancel(flagged, now=4.0) is None


def test_a_rerun_replaces_a_failed_job_but_keeps_a_reusable_one():
    fresh = jobs.new_job(SPEC, graph_name="g", token=None, now=5.0)
    assert jobs.rerun(_finished("feasible"), fresh) is None
    rerun = jobs.rerun(_finished("timeout"), fresh)
    assert rerun.status is JobStatus.QUEUED and rerun.attempts == 0 and rerun.created_at == 5.0


def test_each_token_has_its_own_job_for_one_request():
    mine, theirs = (jobs.new_job(SPEC, graph_name="g", token=t, now=1.0) for t in ("t1", "t2"))
    assert mine.id != theirs.id and mine.spec.key == theirs.spec.key == SPEC.key
    assert jobs.new_job(SPEC, graph_name="g", token=None, now=1.0).id == SPEC.key  # no authentication


def test_records_round_trip():
    job = _finished("feasible")
    assert jobs.Job.from_record(job.to_record()) == job
    offloading = jobs.new_job(replace(SPEC, transfer={"bandwidth": 4.0, "latency": 0.5}, host_budget=7),
                              graph_name="g", token=None, now=1.0)
    back = jobs.Job.from_record(json.loads(json.dumps(offloading.to_record())))
    assert back == offloading and back.spec.transfer == {"bandwidth": 4.0, "latency": 0.5}
    assert back.spec.key == offloading.spec.key == offloading.id


def test_a_process_that_reuses_a_dead_owners_pid_is_not_that_owner():
    """After a container restart the new process may get the old one's pid; its start time tells them apart."""
    host, pid, started, slot = jobs.owner_name("slot0").split(":")
    assert pid == str(os.getpid()) and started.isdigit()
    before_restart = f"{host}:{pid}:{int(started) - 1}:{slot}"
    assert jobs.owner_here(before_restart) is False
    running = jobs.claim(jobs.new_job(SPEC, graph_name="g", token=None, now=1.0), owner=before_restart, now=2.0,
                         lease_s=1)
    assert "exited" in jobs.lost_reason(running, now=2.5, lease_s=1)  # at once, not after five leases
