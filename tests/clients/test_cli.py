"""`remat` on odd but legal graphs and on bad arguments: one line and an exit code, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from factories import BENCHMARK_DIR, graph_doc

from remat.clients.cli import main
from remat.schedules import Graph, Schedule


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``remat ARGS`` (argparse exits for arguments it cannot read)."""
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


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


@pytest.mark.parametrize(("args", "words"), [
    (["solve", VGG16, "--budget", "1e400"], "A size must be at most"),
    (["solve", VGG16, "--budget-ratio", "1e308"], "'budget_ratio' must be a number in"),
    (["compare", VGG16, "--points", "1"], "A sweep needs at least 2 points"),
    (["compare", VGG16, "--points", "4", "--time-limit", "0"], "'time_limit_s' must be > 0"),
])
def test_bad_arguments_get_one_line_naming_them(capsys: pytest.CaptureFixture[str], args: list[str],
                                                 words: str) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2
    assert "error: " in err and words in err and "Traceback" not in err
