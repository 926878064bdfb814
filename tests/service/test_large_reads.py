"""Reading a large sweep: the API streams it, one result at a time, so its memory grows by less than the answer's
size (35 MB read: 15 MB added; it was 476 MB, thirteen times the answer, when the whole sweep was built first)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
from factories import chain
from processes import Processes, memory_mb

from remat.service import SqliteStore
from remat.service._auth import token_id
from remat.service._executor import STORE_FILE
from remat.service._jobs import Claim, SolveSpec
from remat.service._sweeps import new_sweep
from remat.solvers import solve

ALICE = "alice-" + "a" * 26
POINTS = 60
"""Jobs of the sweep, each with a result of about 700 KB (a 4,001-node chain's): about 40 MB in all."""


def _large_sweep(data_dir: Path) -> str:
    """A sweep of ALICE's with POINTS ended jobs on a 4,001-node chain, written straight into the store."""
    graph = chain(2000)
    result = solve(graph, budget_ratio=0.5, strategy="chen-sqrtn").document()
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(data_dir / STORE_FILE)
    try:
        store.put_graph(graph.sha256, graph.to_json())
        jobs = []
        for k in range(POINTS):
            spec = SolveSpec(graph.sha256, result.budget + k, "chen-sqrtn", "auto", 60.0, 0.0)
            job, _ = store.submit(spec, graph_name=graph.name, token=token_id(ALICE))
            claimed = store.mark_running(job.id, "host:1:a")
            assert claimed is not None
            store.mark_finished(Claim(job.id, "host:1:a", claimed.attempts), replace(result, budget=spec.budget))
            jobs.append(job)
        sweep = new_sweep(jobs, graph_name=graph.name, token=token_id(ALICE), now=store.clock(), planned=True)
        store.put_sweep(sweep)
        return sweep.id
    finally:
        store.close()


def _reset_peak(pid: int) -> None:
    """Make the process's peak resident memory (VmHWM) its resident memory now (Linux's clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def test_reading_a_large_sweep_adds_far_less_than_its_size_to_the_apis_memory(processes: Processes,
                                                                              tmp_path: Path):
    sweep_id = _large_sweep(tmp_path / "data")
    server = processes.server(REMAT_TOKENS=ALICE)
    url, auth = f"{server.url}/v1/sweeps/{sweep_id}", {"Authorization": f"Bearer {ALICE}"}
    summary = httpx.get(url, params={"results": "summary"}, headers=auth, timeout=60)  # warms every code path
    assert summary.status_code == 200 and len(summary.json()["results"]) == POINTS
    before = memory_mb(server.pid)
    _reset_peak(server.pid)
    size, body = 0, bytearray()
    with httpx.stream("GET", url, headers=auth, timeout=120) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        for chunk in answer.iter_bytes():
            size += len(chunk)
            body += chunk
    added_mb = memory_mb(server.pid, "VmHWM") - before
    doc = json.loads(bytes(body))
    assert doc["status"] == "succeeded" and len(doc["jobs"]) == POINTS and len(doc["results"]) == POINTS
    assert doc["results"][0]["plan"] and doc["results"][0]["schedule"]["encoding"] == "changes"
    assert {r["budget"] for r in doc["results"]} == {j["budget"] for j in doc["jobs"]}
    size_mb = size / 2**20
    assert size_mb > 30, size_mb
    assert added_mb < size_mb, f"reading {size_mb:.0f} MB added {added_mb:.0f} MB to the API's memory"
