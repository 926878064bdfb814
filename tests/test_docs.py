"""The user documentation: every relative link leads somewhere, and the format examples are real.

Every ```json block of docs/graphs.md and docs/plans.md is read with remat's own readers: a graph
must validate, a plan must simulate on the example graph, a schedule must read and give a valid plan.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from remat.schedules import Graph, Plan, Schedule, Transfer, plan_from_schedule, simulate

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    heads = re.findall(r"^#{1,6}\s+(.*?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files_and_headings(page: Path) -> None:
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target!r}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link to {target!r}: no such heading in {dest.name}"


def test_the_docs_index_lists_every_page() -> None:
    listed = {Path(t.partition("#")[0]).name for t in _links(DOCS / "README.md")}
    missing = {p.name for p in DOCS.iterdir() if p.suffix in (".md", ".png") and p.name != "README.md"} - listed
    assert not missing, f"docs/README.md does not list {sorted(missing)}"


def _json_blocks(name: str) -> list:
    blocks = [body for lang, body in FENCE.findall((DOCS / name).read_text(encoding="utf-8")) if lang == "json"]
    assert blocks, f"{name} has no json examples"
    return [json.loads(b) for b in blocks]


def _example_graph() -> Graph:
    return Graph.from_json(_json_blocks("graphs.md")[0])


def test_graph_examples_validate() -> None:
    for doc in _json_blocks("graphs.md"):
        graph = Graph.from_json(doc)
        assert graph.to_json()["nodes"]
    g = _example_graph()
    assert (g.base_cost, g.min_feasible_budget, g.checkpoint_all_peak) == (16.0, 1300, 1404)


def test_plan_and_schedule_examples_simulate() -> None:
    graph = _example_graph()
    plans, schedules = [], []
    for doc in _json_blocks("plans.md"):
        if isinstance(doc, list):
            plans.append(simulate(graph, Plan.from_json(graph, doc), transfer=Transfer(bandwidth=50)))
        else:
            schedules.append(Schedule.from_json(graph, doc))
    assert len(plans) == 2 and len(schedules) == 2
    sim, offload = plans
    assert (sim.cost, sim.peak_memory, sim.peak_step, sim.recomputations) == (18.0, 1304, 5, 1)
    assert sim.timing is None
    # the offload example: x1 copied out from 2 to 4 and back, after g2, from 13 to 15: 100 bytes for 2 units
    assert (offload.cost, offload.peak_memory, offload.host_peak_memory) == (18.0, 1304, 100)
    copies = [(s.start, s.end) for s in offload.timing.spans if s.op in ("offload", "reload")]
    assert copies == [(2, 4), (13, 15)]
    assert offload.timing.stream("compute")[-1].start == 15
    compact, full = schedules
    assert (compact.R == full.R).all() and (compact.S == full.S).all()
    plan = plan_from_schedule(graph, compact)
    assert plan.to_json(graph) == _json_blocks("plans.md")[0]
    assert simulate(graph, plan).peak_memory == 1304
