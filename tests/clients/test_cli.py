"""`remat` on odd but legal graphs and on bad arguments: one line and an exit code, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from factories import BENCHMARK_DIR, chain, graph_doc, stacked_blocks, to_json_text
from processes import Processes

from remat.clients.cli import main
from remat.schedules import Graph, Schedule, Transfer
from remat.solvers import STRATEGIES, Outcome, Strategy


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``remat ARGS`` (argparse exits for arguments it cannot read)."""
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["solve", "validate", "strategies", "serve", "worker", "healthcheck",
                                     "compare", "max-batch", "profile"])
def test_every_command_prints_its_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, err = run(capsys, command, "--help")
    assert code == 0, err
    assert out.startswith(f"usage: remat {command}")


@pytest.fixture
def weightless(tmp_path: Path) -> str:
    """A legal graph whose every output has size 0 (its checkpoint-all peak is 0)."""
    path = tmp_path / "weightless.json"
    path.write_text(json.dumps(graph_doc([{"id": "a", "deps": [], "cost": 1, "memory": 0},
                                          {"id": "b", "deps": ["a"], "cost": 1, "memory": 0}])))
    return str(path)


def test_validate_and_solve_a_graph_of_size_zero(capsys: pytest.CaptureFixture[str], weightless: str) -> None:
    code, out, err = run(capsys, "validate", weightless)
    assert code == 0, err
    assert "checkpoint-all peak 0 B" in out and "ratio" not in out
    code, out, err = run(capsys, "solve", weightless, "--budget", "0", "--strategy", "checkpoint-all")
    assert code == 0, err
    assert "feasible" in out and "peak 0 B / budget 0 B" in out


VGG16 = str(BENCHMARK_DIR / "vgg16.json")


def test_solve_writes_the_compact_schedule_or_the_full_one(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    compact, full = tmp_path / "compact.json", tmp_path / "full.json"
    for out, extra in ((compact, []), (full, ["--full-schedule"])):
        code, _, err = run(capsys, "solve", VGG16, "--budget-ratio", "1", "--strategy", "checkpoint-all",
                           "-o", str(out), *extra)
        assert code == 0, err
    graph = Graph.from_path(VGG16)
    compact_doc, full_doc = json.loads(compact.read_text()), json.loads(full.read_text())
    assert compact_doc["schedule"]["encoding"] == "changes" and "encoding" not in full_doc["schedule"]
    assert np.array_equal(Schedule.from_json(graph, compact_doc["schedule"]).S,
                          Schedule.from_json(graph, full_doc["schedule"]).S)
    assert compact_doc["plan"] == full_doc["plan"]


def test_solve_passes_strategy_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "solve", VGG16, "--budget-ratio", "1", "--strategy", "checkmate", "--json",
                         "--option", "path=milp", "--option", "warm_start=false", "--time-limit", "30",
                         "--run-to-limit")  # to the proof: the convergence rule may stop first on a busy machine
    assert code == 0, err
    assert json.loads(out)["status"] == "optimal"
    code, _, err = run(capsys, "solve", VGG16, "--budget-ratio", "1", "--strategy", "griewank", "--option", "seed=1")
    assert code == 2 and "Unknown option 'seed' for griewank; the options are: snapshots." in err


def test_a_solve_that_finds_nothing_says_how_low_a_plan_went(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "solve", str(BENCHMARK_DIR / "rl100.json"), "--budget-ratio", "0.6", "--strategy",
                         "checkmate", "--option", "path=anneal", "--time-limit", "2")
    assert code == 1, err
    assert "rl100: checkmate, timeout, budget " in out and ", no plan fits it; the leanest found peaks at " in out


@pytest.fixture(scope="module")
def over_the_old_cap(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A training graph of 2,500 transformer-like blocks: 25,003 nodes, above the 20,000 graphs were once held to."""
    path = tmp_path_factory.mktemp("large") / "stacked2500.json"
    path.write_text(to_json_text(stacked_blocks(2500)))
    return str(path)


def test_the_default_strategy_solves_a_graph_above_the_old_cap(capsys: pytest.CaptureFixture[str],
                                                                over_the_old_cap: str) -> None:
    code, out, err = run(capsys, "solve", over_the_old_cap, "--budget-ratio", "0.7", "--time-limit", "15", "--json")
    assert code == 0, (err, out[-2000:])
    result = json.loads(out)
    assert result["strategy"] == "checkmate" and result["status"] in ("feasible", "optimal")
    assert result["peak_memory"] <= result["budget"] and result["cost"] >= result["base_cost"]


@pytest.mark.parametrize(("strategy", "nodes"), [("checkmate-lp", "700"), ("griewank", "5,000"),
                                                 ("checkpoint-last", "20,000")])
def test_a_strategy_that_outgrows_the_graph_refuses_it_naming_its_limit_and_checkmate(
        capsys: pytest.CaptureFixture[str], over_the_old_cap: str, strategy: str, nodes: str) -> None:
    code, out, err = run(capsys, "solve", over_the_old_cap, "--budget-ratio", "0.6", "--strategy", strategy)
    assert code == 2 and not out and "Traceback" not in err
    assert err.startswith(f"remat: error: Strategy {strategy!r} takes graphs of at most {nodes} nodes (")
    assert "this one has 25,003. Use 'checkmate'" in err
    listed = {line.split()[0]: line for line in run(capsys, "strategies")[1].splitlines()}
    assert f"[graphs of at most {nodes} nodes]" in listed[strategy] and "at most" not in listed["checkmate"]


@pytest.mark.parametrize(("args", "words"), [
    (["solve", VGG16, "--budget", "1e400"], "A size must be at most"),
    (["solve", VGG16, "--budget-ratio", "1", "--option", "snapshots"], "expected KEY=VALUE, got 'snapshots'"),
    (["solve", VGG16, "--budget-ratio", "1e308"], "'budget_ratio' must be a number in"),
    (["compare", VGG16, "--points", "1"], "A sweep needs at least 2 points"),
    (["compare", VGG16, "--points", "4", "--time-limit", "0"], "'time_limit_s' must be > 0"),
])
def test_bad_arguments_get_one_line_naming_them(capsys: pytest.CaptureFixture[str], args: list[str],
                                                 words: str) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2
    assert "error: " in err and words in err and "Traceback" not in err


def test_max_batch_prints_each_strategy_against_checkpoint_all(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    paths = []
    for batch in (2, 4):
        path = tmp_path / f"chain-b{batch}.json"
        path.write_text(json.dumps(chain(8, cost=2.0 * batch, memory=100 * batch, fixed_memory=1_000).to_json()))
        paths.append(f"{path}@{batch}")
    code, out, _ = run(capsys, "max-batch", *paths, "--budget", "50000", "--time-limit", "10")
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert set(rows) == {"checkmate", "checkpoint-all"}
    assert rows["checkpoint-all"][-1] == "1.00x" and int(rows["checkmate"][1]) > int(rows["checkpoint-all"][1])
    code, out, _ = run(capsys, "max-batch", *paths, "--budget", "50000", "--strategies", "chen-greedy", "--json")
    (answer,) = json.loads(out)
    assert answer["strategy"] == "chen-greedy" and answer["result"]["peak_memory"] <= 50_000
    assert answer["batch"] == max(t["batch"] for t in answer["trials"] if t["ok"])


@pytest.mark.parametrize(("graphs", "extra", "words"), [
    ([VGG16], [], "name each graph with the batch size it was captured at, as FILE@BATCH"),
    ([f"{VGG16}@256", f"{VGG16}@256"], [], "Two graphs at batch 256"),
    ([f"{VGG16}@256", f"{BENCHMARK_DIR / 'vgg19.json'}@512"], [], "have different nodes"),
    ([f"{VGG16}@256"], ["--max-overhead", "0.5"], "'max_overhead' must be >= 1"),
])
def test_max_batch_refuses_graphs_it_cannot_read_as_lines(capsys: pytest.CaptureFixture[str], graphs: list[str],
                                                          extra: list[str], words: str) -> None:
    code, _, err = run(capsys, "max-batch", *graphs, "--budget", "16GiB", *extra)
    assert code == 2 and words in err and "Traceback" not in err


def test_solve_with_copy_times_and_a_host_budget(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "solve", VGG16, "--budget-ratio", "1", "--strategy", "checkpoint-all", "--json",
                         "--bandwidth", "1e6", "--latency", "0.5", "--host-budget", "1GiB")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["transfer"] == {"bandwidth": 1e6, "latency": 0.5} and doc["host_budget"] == 2**30
    assert doc["host_peak_memory"] == 0
    code, out, err = run(capsys, "solve", VGG16, "--budget-ratio", "1", "--strategy", "checkpoint-all",
                         "--transfer", "pcie5-x16", "--seconds-per-cost-unit", "1e-3", "--latency-s", "1e-5")
    assert code == 0, err
    assert "host peak 0 B" in out and "host budget" not in out
    code, out, err = run(capsys, "solve", VGG16, "--budget-ratio", "1", "--strategy", "checkpoint-all", "--json",
                         "--transfer", "pcie5-x16", "--seconds-per-cost-unit", "1e-3", "--latency-s", "1e-5")
    assert json.loads(out)["transfer"] == Transfer.from_profile("pcie5-x16", seconds_per_cost_unit=1e-3,
                                                                latency_s=1e-5).to_json()


@pytest.mark.parametrize(("args", "words"), [
    (["--transfer", "pcie9-x16", "--seconds-per-cost-unit", "1"], "argument --transfer: invalid choice: 'pcie9-x16'"),
    (["--transfer", "pcie4-x16"], "--transfer needs --seconds-per-cost-unit S"),
    (["--transfer", "pcie4-x16", "--seconds-per-cost-unit", "1", "--bandwidth", "5"], "not both"),
    (["--transfer", "pcie4-x16", "--seconds-per-cost-unit", "1", "--latency", "5"],
     "--latency goes with --bandwidth; with --transfer, give the latency in seconds (--latency-s)"),
    (["--bandwidth", "5", "--seconds-per-cost-unit", "1"], "--seconds-per-cost-unit goes with --transfer PROFILE"),
    (["--latency", "5"], "--latency goes with --bandwidth B"),
    (["--bandwidth", "0"], "argument --bandwidth: must be a finite number > 0, got 0"),
    (["--bandwidth", "inf"], "argument --bandwidth: must be a finite number > 0, got inf"),
    (["--bandwidth", "5", "--latency", "-1"], "argument --latency: must be a finite number >= 0, got -1"),
    (["--bandwidth", "5", "--host-budget", "lots"], "Cannot read 'lots' as a size"),
])
def test_bad_offload_options_get_one_line_naming_them(capsys: pytest.CaptureFixture[str], args: list[str],
                                                       words: str) -> None:
    for command in (["solve", VGG16, "--budget-ratio", "1", "--strategy", "checkpoint-all"],
                    ["compare", VGG16, "--strategies", "checkpoint-all", "--points", "2"]):
        code, _, err = run(capsys, *command, *args)
        assert code == 2 and words in err and "Traceback" not in err, err
        assert len([line for line in err.splitlines() if "error" in line]) == 1


def test_checkmate_told_to_offload_needs_copy_times(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "solve", VGG16, "--budget-ratio", "0.5", "--option", "offload=true")
    assert code == 2 and "Strategy 'checkmate' with --option offload=true moves values to host memory" in err


def test_a_strategy_that_offloads_is_listed_as_such_and_needs_copy_times(capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STRATEGIES, "offload-test", Strategy("offload-test", "Copies.", lambda g, b, c: Outcome(None),
                                                             offloads=True))
    code, out, _ = run(capsys, "strategies")
    assert code == 0
    listed = {line.split()[0]: line for line in out.splitlines()}
    assert "[offloads: needs --transfer or --bandwidth]" in listed["offload-test"]
    assert "offloads" not in listed["checkmate"]
    for command in (["solve", VGG16, "--budget-ratio", "1", "--strategy", "offload-test"],
                    ["compare", VGG16, "--strategies", "checkpoint-all,offload-test"]):
        code, _, err = run(capsys, *command)
        assert code == 2 and "Strategy 'offload-test' moves values to host memory and needs copy times: give " \
                             "--transfer PROFILE --seconds-per-cost-unit S, or --bandwidth B" in err


def test_max_batch_on_a_server_prints_the_table_it_prints_in_process(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path):
    paths = []
    for batch in (2, 4):
        path = tmp_path / f"chain-b{batch}.json"
        path.write_text(json.dumps(chain(8, cost=2.0 * batch, memory=100 * batch, fixed_memory=1_000).to_json()))
        paths.append(f"{path}@{batch}")
    args = ["max-batch", *paths, "--budget", "50000", "--strategies", "checkpoint-all,chen-greedy"]
    code, here, _ = run(capsys, *args)
    assert code == 0
    procs = Processes(tmp_path, {"REMAT_DATA_DIR": str(tmp_path / "data")})
    try:
        server = procs.server()
        code, there, err = run(capsys, *args, "--server", server.url)
        assert code == 0, err
        assert there == here
        assert "chen-greedy: batch " in err and f"dashboard: {server.url}/dashboard/max-batch/" in err
        code, out, err = run(capsys, *args, "--server", server.url, "--json")
        assert json.loads(out)["format"] == "remat.max-batch/v1"
        code, _, err = run(capsys, "max-batch", paths[0], "--budget", "50000", "--server", server.url)
        assert code == 2 and "two or more batch sizes" in err and "Traceback" not in err
    finally:
        procs.stop_all()
