"""One conformance suite for every solver backend, subclassed per engine; plus the process machinery."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from exhaustive import SMALL_DAG, STAGE_INFEASIBLE, stage_optima
from factories import FCN8_AT_08_OPTIMUM, benchmark_graph, chain

from remat.schedules import BackendUnavailable, InvalidRequest, UnknownStrategy
from remat.solvers import ResultStatus, Stop, available_backends, solve
from remat.solvers.backends import BACKENDS, Limits, choose_backend, get_backend, run_backend
from remat.solvers.checkmate import build_checkmate_model


def solver_children() -> list[int]:
    """Live solver processes started by this test process."""
    me, found = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == me \
                    and b"remat.solvers._children" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


class BackendConformance:
    """What every backend must do; a subclass names the backend."""

    backend = ""

    @pytest.fixture(autouse=True)
    def _installed(self) -> None:
        if not BACKENDS[self.backend].available():
            pytest.skip(f"{self.backend} is not installed")

    @pytest.mark.parametrize("budget, optimum", [(5, 22.0), (4, 26.0)])
    def test_unit_chain_optima(self, budget: int, optimum: float) -> None:
        result = solve(chain(8), budget=budget, strategy="checkmate", backend=self.backend)
        assert result.status is ResultStatus.OPTIMAL, result.log
        assert (result.cost, result.backend) == (optimum, self.backend)
        assert result.lower_bound is not None and result.lower_bound == pytest.approx(optimum, rel=1e-4)

    def test_small_dag_optima_equal_exhaustive_search(self) -> None:
        budgets = [101, 113, 121]
        for budget, optimum in zip(budgets, stage_optima(SMALL_DAG, budgets), strict=True):
            assert optimum > SMALL_DAG.base_cost
            result = solve(SMALL_DAG, budget=budget, strategy="checkmate", backend=self.backend,
                           options={"warm_start": False})
            assert result.status is ResultStatus.OPTIMAL, (budget, result.log)
            assert result.cost == pytest.approx(optimum, rel=1e-9)
            assert result.fits

    def test_proves_infeasibility_above_the_feasible_minimum(self) -> None:
        assert stage_optima(STAGE_INFEASIBLE, [78, 79])[0] == math.inf
        result = solve(STAGE_INFEASIBLE, budget=78, strategy="checkmate", backend=self.backend)
        assert result.status is ResultStatus.INFEASIBLE
        assert result.plan is None

    def test_the_lp_relaxation_bound_matches_highs(self) -> None:
        if not BACKENDS[self.backend].lp:
            with pytest.raises(InvalidRequest, match="Unknown backend"):
                solve(chain(8), budget=5, strategy="checkmate-lp", backend=self.backend)
            return
        mine = solve(chain(8), budget=5, strategy="checkmate-lp", backend=self.backend)
        reference = solve(chain(8), budget=5, strategy="checkmate-lp", backend="highs")
        assert mine.lower_bound == pytest.approx(reference.lower_bound, rel=1e-6)
        assert mine.lower_bound is not None and mine.lower_bound <= 22.0 + 1e-9


class HardInstanceConformance(BackendConformance):
    """Models too big for Gurobi's pip licence (not run for gurobi): claims, cancel, timeout."""

    def test_every_claim_on_fcn8_is_true(self) -> None:
        result = solve(benchmark_graph("fcn8"), budget_ratio=0.8, strategy="checkmate", backend=self.backend,
                       time_limit_s=20, options={"path": "milp"})
        assert result.fits and result.cost is not None and result.lower_bound is not None
        assert result.cost >= FCN8_AT_08_OPTIMUM * (1 - 1e-9)
        assert result.lower_bound <= FCN8_AT_08_OPTIMUM * (1 + 1e-9)
        if result.status is ResultStatus.OPTIMAL:
            assert result.cost == pytest.approx(FCN8_AT_08_OPTIMUM, rel=1e-4)

    def test_cancel_mid_solve_returns_the_best_plan_so_far_within_seconds(self) -> None:
        g = benchmark_graph("rl100")
        stop = Stop()
        timer = threading.Timer(4.0, stop.set)
        timer.start()
        try:
            result = solve(g, budget_ratio=0.9, strategy="checkmate", backend=self.backend, time_limit_s=300,
                           stop_event=stop, convergence=None)
        finally:
            timer.cancel()
        assert result.status is ResultStatus.CANCELLED
        assert result.plan is not None and result.fits
        assert result.solve_time_s < 4.0 + 15.0
        assert solver_children() == []

    def test_timeout_returns_the_incumbent_or_the_fallback(self) -> None:
        g = benchmark_graph("rl100")
        result = solve(g, budget_ratio=0.9, strategy="checkmate", backend=self.backend, time_limit_s=5,
                       convergence=None)
        assert result.status in (ResultStatus.FEASIBLE, ResultStatus.OPTIMAL)
        assert result.fits
        assert result.solve_time_s < 5 + 15.0
        assert solver_children() == []


class TestHighs(HardInstanceConformance):
    backend = "highs"


class TestCbc(HardInstanceConformance):
    backend = "cbc"


class TestCpsat(HardInstanceConformance):
    backend = "cpsat"


class TestScip(HardInstanceConformance):
    backend = "scip"


class TestGurobi(BackendConformance):
    backend = "gurobi"

    def test_a_model_over_the_pip_licence_size_is_refused_with_a_clear_message(self) -> None:
        if BACKENDS["gurobi"].size_limit() is None:
            pytest.skip("a full Gurobi licence is installed")
        model = build_checkmate_model(benchmark_graph("fcn8"), benchmark_graph("fcn8").checkpoint_all_peak)
        with pytest.raises(BackendUnavailable, match=r"size-limited licence \(at most 2,000 variables"):
            choose_backend("gurobi", model.milp)
        with pytest.raises(BackendUnavailable, match="pip package's size-limited licence"):
            run_backend(get_backend("gurobi"), model.milp, Limits(10, 1e-4, 1), lambda progress: None)
        with pytest.raises(BackendUnavailable, match="2,000"):
            solve(benchmark_graph("fcn8"), budget_ratio=0.9, strategy="checkmate", backend="gurobi")


def test_auto_picks_an_installed_open_source_engine_and_never_the_size_limited_licence() -> None:
    model = build_checkmate_model(chain(4), 6).milp
    chosen = choose_backend("auto", model)
    assert chosen.available() and chosen.size_limit() is None
    assert chosen.name != "gurobi" or BACKENDS["gurobi"].size_limit() is None
    assert choose_backend("auto", model.relaxed()).lp


def test_unknown_backends_are_named_with_the_valid_ones() -> None:
    with pytest.raises(UnknownStrategy, match="choose one of: auto, highs, cbc, cpsat, scip, gurobi"):
        get_backend("glpk")
    with pytest.raises(InvalidRequest, match="Unknown backend 'glpk'"):
        solve(chain(3), budget_ratio=0.9, strategy="checkmate", backend="glpk")


def test_listing_backends_imports_no_engine_and_solving_keeps_engines_out_of_the_caller() -> None:
    script = (
        "import json, sys\n"
        "from remat.solvers import available_backends, solve\n"
        "sys.path.insert(0, 'tests')\n"
        "from factories import chain\n"
        "names = available_backends()\n"
        "result = solve(chain(4), budget=6, strategy='checkmate', backend='highs')\n"
        "engines = sorted(m for m in ('highspy', 'ortools', 'pulp', 'pyscipopt', 'gurobipy') if m in sys.modules)\n"
        "print(json.dumps([list(names), result.status.value, engines]))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120,
                         check=True)
    names, status, engines = json.loads(out.stdout.strip().splitlines()[-1])
    assert "highs" in names and set(names) <= set(BACKENDS)
    assert names == list(available_backends())
    assert status == "optimal"
    assert engines == []
