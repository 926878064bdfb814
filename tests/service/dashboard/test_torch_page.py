"""The job page of a plan for a graph the PyTorch client captured: its values by module, source line and fate."""

from __future__ import annotations

import html

import pytest

torch = pytest.importorskip("torch")

from fastapi.testclient import TestClient  # noqa: E402
from processes import wait_until  # noqa: E402
from torch_models import gpt  # noqa: E402

from remat.clients.torch import export_graph  # noqa: E402
from remat.schedules import Plan, PlanValues, by_module, format_size, simulate  # noqa: E402
from remat.solvers import ResultDocument  # noqa: E402

pytestmark = pytest.mark.torch


def test_the_job_page_of_a_captured_model_shows_its_values_by_module_with_their_fates(client: TestClient):
    model, inputs, loss_fn = gpt()
    graph = export_graph(model, inputs, loss_fn=loss_fn)
    body = {"graph": graph.to_json(), "budget_ratio": 0.6, "strategy": "linearized-greedy", "wait_s": 0}
    job = client.post("/v1/solve", json=body).json()
    done = wait_until(lambda: (j := client.get(f"/v1/jobs/{job['id']}").json())["status"] == "succeeded" and j,
                      timeout_s=120)
    result = ResultDocument.from_json(done["result"])
    plan = Plan.from_json(graph, result.plan)
    read = PlanValues.of(graph, plan, simulate(graph, plan))
    assert read.again, "the plan recomputes something at this budget"

    page = html.unescape(client.get(f"/dashboard/jobs/{job['id']}").text)
    assert "Live at the planned peak, by module" in page and "Recomputed or offloaded, by module" in page
    for group in by_module(read.live_at_peak)[:3] + by_module(read.again)[:3]:
        assert f"<code>{group.module or '(the step)'}</code>" in page and format_size(group.bytes) in page
    recomputed = read.again[0]
    assert recomputed.module.startswith("blocks.") and recomputed.line.startswith("torch_models.py:")
    assert (f"<td>{recomputed.line}</td><td><code>{recomputed.op}</code></td><td class=\"num\">"
            f"{format_size(recomputed.bytes)}</td><td class=\"num\">{recomputed.cost:.4g}</td>"
            f"<td>{recomputed.fate}</td>") in page
    assert "recomputed x" in page and "kept" in page
