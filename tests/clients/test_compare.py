"""`remat compare`: the sweep in-process or on a server, the table, and the offline HTML report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import Watched
from factories import BENCHMARK_DIR, benchmark_graph
from playwright.sync_api import Browser
from processes import Processes

from remat.clients._compare import compare_here
from remat.clients.cli import main
from remat.schedules import Transfer, format_size
from remat.solvers import plan_sweep

VGG16 = str(BENCHMARK_DIR / "vgg16.json")
STRATEGIES = ["checkpoint-all", "chen-sqrtn", "griewank"]


def compare(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["compare", *args])
    out, err = capsys.readouterr()
    return code, out, err


def table_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("budget"))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[start:] if line.strip()][:]


def test_in_process_prints_the_grid_and_writes_a_report(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    report = tmp_path / "vgg16.html"
    code, out, err = compare(capsys, VGG16, "--strategies", ",".join(STRATEGIES), "--points", "4",
                             "--html", str(report))
    assert code == 0, err
    plan = plan_sweep(benchmark_graph("vgg16"), strategies=STRATEGIES, points=4)
    rows = [r for r in table_rows(out) if not r[0].startswith("natural")]
    assert rows[0] == ["budget", "of peak", *STRATEGIES]
    assert [r[0] for r in rows[1:]] == [format_size(b) for b in sorted(plan.budgets)]
    assert rows[-1][2] == "1.000*", "checkpoint-all fits at its own peak with no overhead"
    assert rows[1][2] == "over budget"
    assert f"[{len(plan.points)}/{len(plan.points)}]" in err and f"report: {report}" in err
    html = report.read_text()
    assert "<script src=" not in html and "<link rel=\"stylesheet\"" not in html, "everything is inlined"
    assert "plotly.js (cartesian - minified)" in html


@pytest.mark.browser
def test_the_report_works_offline_in_chromium(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              browser: Browser):
    report = tmp_path / "report.html"
    code, _, err = compare(capsys, VGG16, "--strategies", ",".join(STRATEGIES), "--points", "3", "--html", str(report))
    assert code == 0, err
    watched = Watched(browser, offline=True)
    try:
        watched.open(report.as_uri())
        assert watched.page.evaluate("document.getElementById('plot-curves').data.map(t => t.name)") == STRATEGIES
        assert watched.page.locator("#plot-curves .legend .traces").count() == len(STRATEGIES)
        assert watched.page.locator("#sweep-progress .live").count() == 0
        watched.screenshot("compare-report-vgg16.png")
        assert watched.errors == []
    finally:
        watched.close()


def test_on_a_server_gives_the_same_grid_as_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    graph = benchmark_graph("vgg16")
    budgets = ",".join(str(b) for b in (graph.min_feasible_budget, 14 * 2**30, graph.checkpoint_all_peak))
    args = [VGG16, "--strategies", ",".join(STRATEGIES), "--budgets", budgets]
    code, here, _ = compare(capsys, *args)
    assert code == 0
    procs = Processes(tmp_path, {"REMAT_DATA_DIR": str(tmp_path / "data")})
    try:
        server = procs.server()
        code, there, err = compare(capsys, *args, "--server", server.url)
    finally:
        procs.stop_all()
    assert code == 0, err
    assert there == here
    assert re.search(rf"dashboard: {re.escape(server.url)}/dashboard/sweeps/[0-9a-f]{{64}}", err)


def test_bad_requests_are_one_line_errors(capsys: pytest.CaptureFixture[str]):
    code, _, err = compare(capsys, VGG16, "--strategies", "no-such-strategy")
    assert code == 2 and "Unknown strategy 'no-such-strategy'" in err and "Traceback" not in err
    code, _, err = compare(capsys, VGG16, "--points", "3", "--server", "http://127.0.0.1:9")
    assert code == 2 and "--points applies in-process only" in err
    code, _, err = compare(capsys, str(BENCHMARK_DIR / "resnet50.json"), "--strategies", "chen-sqrtn")
    assert code == 2 and "forward node '5'" in err and "Traceback" not in err


def test_in_process_every_point_is_solved_with_the_copy_times(capsys: pytest.CaptureFixture[str]):
    graph = benchmark_graph("vgg16")
    transfer = Transfer(bandwidth=1e6)
    view = compare_here(graph, strategies=["checkpoint-all", "chen-sqrtn"], budgets=[graph.checkpoint_all_peak],
                        transfer=transfer, host_budget=2**30, report=lambda line: None)
    assert [(c.strategy, c.result.transfer, c.result.host_budget) for c in view.cells] == [
        ("checkpoint-all", transfer, 2**30), ("chen-sqrtn", transfer, 2**30)]
