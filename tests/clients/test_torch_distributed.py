"""remat under DistributedDataParallel, two gloo processes on the CPU: ``DDP(rematerialize(model))`` and
``torch.compile(DDP(model), backend=backend(...))`` give every rank the gradients DDP gives without remat, and
DDP's gradient buckets are fixed memory in every plan (tests/data_parallel_steps.py runs the ranks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.torch

WORLD = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp")
    script = Path(__file__).resolve().parent.parent / "data_parallel_steps.py"
    done = subprocess.run([sys.executable, str(script), str(WORLD), str(out)], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(WORLD)]


def test_ddp_over_a_planned_module_gives_every_rank_ddps_gradients(ranks: list[dict]) -> None:
    for found in ranks:
        assert found["module"]["difference"] == 0.0


def test_a_planned_module_under_ddp_is_planned_again_with_its_buckets_and_holds_its_plan(ranks: list[dict]) -> None:
    for found in ranks:
        module = found["module"]
        assert module["plans"] == 2  # planned alone by rematerialize(), then under DDP
        assert module["buckets"] == found["bucket_bytes"] > 0
        assert module["measured"] <= module["planned"] <= module["budget"]


def test_compiling_ddp_with_the_backend_plans_each_bucket_graph_with_the_buckets(ranks: list[dict]) -> None:
    for found in ranks:
        compiled = found["compiled"]
        assert compiled["difference"] == 0.0
        assert compiled["graphs"] > 1  # TorchDynamo split the step at DDP's buckets
        assert compiled["buckets"] == [found["bucket_bytes"]] * compiled["graphs"] and compiled["fit"]
