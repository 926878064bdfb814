"""remat in torch.distributed jobs, gloo processes on the CPU (tests/distributed_runs.py runs the ranks):
``DDP(rematerialize(model))`` and ``torch.compile(DDP(model), backend=backend(...))`` give every rank the gradients
DDP gives without remat, DDP's gradient buckets are fixed memory in every plan (a planned module follows the plan
it had, moved by them, without solving again), ranks planning the same graph solve it once, pipeline stages, which
plan different graphs at different times, train as without remat, and a model sharded per block with FSDP2 trains
with FSDP2's gradients within its plans, what FSDP2 holds counted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parent.parent / "distributed_runs.py"


def _run(run: str, world: int, out: Path) -> list[dict]:
    """Each rank's findings of ``run`` on ``world`` processes."""
    done = subprocess.run([sys.executable, str(SCRIPT), run, str(world), str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(world)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return _run("ddp", 2, tmp_path_factory.mktemp("ddp"))


def test_ddp_over_a_planned_module_gives_every_rank_ddps_gradients(ranks: list[dict]) -> None:
    for found in ranks:
        assert found["module"]["difference"] == 0.0


def test_a_planned_module_under_ddp_is_planned_again_with_its_buckets_and_holds_its_plan(ranks: list[dict]) -> None:
    for found in ranks:
        module = found["module"]
        assert len(module["sources"]) == 2  # planned alone by rematerialize(), then under DDP
        assert module["buckets"] == found["bucket_bytes"] > 0
        assert module["measured"] <= module["planned"] <= module["budget"]


def test_a_planned_module_under_ddp_is_solved_once_in_the_job(ranks: list[dict]) -> None:
    alone, under_ddp = zip(*(found["module"]["sources"] for found in ranks), strict=True)
    assert sorted(alone) == ["rank " + str(alone.index("solved")), "solved"]  # one rank solves, the other takes it
    assert under_ddp == ("earlier",) * len(ranks)  # the same graph with DDP's buckets: the plan made alone, moved


def test_compiling_ddp_with_the_backend_plans_each_bucket_graph_with_the_buckets(ranks: list[dict]) -> None:
    for found in ranks:
        compiled = found["compiled"]
        assert compiled["difference"] == 0.0
        assert compiled["graphs"] > 1  # TorchDynamo split the step at DDP's buckets
        assert compiled["buckets"] == [found["bucket_bytes"]] * compiled["graphs"]


def test_ranks_planning_the_same_graph_solve_it_once(tmp_path: Path) -> None:
    *same, other = _run("plans", 4, tmp_path)
    solver = next(rank for rank, r in enumerate(same) if r["source"] == "solved")
    assert sorted(r["source"] for r in same) == ["rank " + str(solver)] * 2 + ["solved"]
    assert len({r["graph"] for r in same}) == 1
    assert other["source"] == "solved" and other["graph"] != same[0]["graph"]  # a batch of its own size


def test_pipeline_stages_planned_apart_train_as_the_pipeline_without_remat(tmp_path: Path) -> None:
    stages = _run("pipeline", 2, tmp_path)
    for found in stages:
        assert found["difference"] == 0.0
        # planned again inside the pipeline's step with its receive buffers, and for the micro-batches after the
        # first, which add into the gradients
        assert found["plans"] == 3
        activations, gradients = found["stage_buffers"]["activations"], found["stage_buffers"]["gradients"]
        n, others = found["micro_batches"], gradients * (found["micro_batches"] - 1) // found["micro_batches"]
        # every micro-batch's inputs, counted with the buffers: a later stage's are its activation buffers, with one
        # more for the inputs' gradient of the micro-batch before; the first stage's, chunks of the caller's batch,
        # allocate nothing; the other gradient buffers
        assert found["planned_inputs"][0] > 0 and found["planned_inputs"][1:] == [0, 0]
        inputs = activations + activations // n
        assert found["planned_buffers"] == [0, inputs + others, inputs + others]
        assert set(found["compiled_buffers"]) == {inputs + others}
        # the steps before and after the first backward plan one graph: the second follows the first's plan
        assert found["sources"][2] == "earlier"
        # through the backend, compiled when the schedule prepares the stage, with its buffers too
        assert found["compiled_difference"] == 0.0
    assert stages[0]["stage_buffers"]["activations"] == 0 < stages[0]["stage_buffers"]["gradients"]
    assert stages[1]["stage_buffers"]["gradients"] == 0 < stages[1]["stage_buffers"]["activations"]
    assert stages[-1]["losses"] == stages[-1]["expected_losses"] and len(stages[-1]["losses"]) == 4


def test_fsdp2_sharded_per_block_trains_through_the_backend_with_fsdp2s_gradients_within_its_plan(
        tmp_path: Path) -> None:
    for found in _run("fsdp", 2, tmp_path):
        assert found["difference"] == 0.0
        assert found["graphs"] > 1  # a graph per block, between FSDP2's hooks
        assert found["rematerialized"] >= 4  # every block recomputes, leaving the blocks after it room
        assert all(b > 0 for b in found["fully_sharded"])  # FSDP2's memory in every graph's plan, the loss's too
        assert found["measured"] <= found["planned"] <= found["budget"]
