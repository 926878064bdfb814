"""Every strategy's options: declared once with the values they accept, checked before anything runs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import chain
from option_values import OPTION_IDS, OPTIONS, bad_values, good_values

from remat.schedules import InvalidRequest
from remat.solvers import STRATEGIES, Option, Strategy, solve
from remat.solvers.checkmate import PATHS


def test_the_strategies_that_take_options_declare_them() -> None:
    taking = {s.name: sorted(s.options) for s in STRATEGIES.values() if s.options}
    assert taking == {
        "chen-greedy": ["segment_budget"], "ap-greedy": ["segment_budget"], "linearized-greedy": ["segment_budget"],
        "griewank": ["snapshots"], "offload-window": ["window"],
        "checkmate": ["offload", "path", "warm_start"], "checkmate-lp": ["rounds", "seed"],
        "checkmate-offload": ["path", "warm_start"],
    }
    assert STRATEGIES["checkmate"].options["path"].choices == tuple(PATHS)


@pytest.mark.parametrize("strategy, name, option", OPTIONS, ids=OPTION_IDS)
def test_every_option_accepts_its_values_and_refuses_others_naming_what_it_accepts(
        strategy: Strategy, name: str, option: Option) -> None:
    for value in good_values(option):
        strategy.check_options({name: value})
    for value in bad_values(option):
        with pytest.raises(InvalidRequest) as e:
            strategy.check_options({name: value})
        message = str(e.value)
        assert f"Option {name!r} of {strategy.name} must be {option.accepts}, got {value!r}." == message
        assert e.value.field == "options"


@pytest.mark.parametrize("strategy, name, option", OPTIONS, ids=OPTION_IDS)
def test_solve_refuses_a_bad_value_before_the_strategy_runs(strategy: Strategy, name: str, option: Option,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object) -> None:
        raise AssertionError("the strategy ran")

    monkeypatch.setitem(STRATEGIES, strategy.name, replace(strategy, run=never))
    with pytest.raises(InvalidRequest, match=f"Option {name!r} of {strategy.name} must be"):
        solve(chain(3), budget_ratio=1.0, strategy=strategy.name, options={name: bad_values(option)[0]})


def test_a_long_value_is_shown_cut_to_100_characters() -> None:
    with pytest.raises(InvalidRequest) as e:
        STRATEGIES["checkmate"].check_options({"path": "x" * 1_000_000})
    assert len(str(e.value)) < 400
    assert "... (1000002 characters)" in str(e.value)


def test_an_unknown_option_is_named_and_the_known_ones_listed() -> None:
    with pytest.raises(InvalidRequest, match="Unknown option 'nope' for griewank; the options are: snapshots"):
        STRATEGIES["griewank"].check_options({"nope": 1})
    with pytest.raises(InvalidRequest, match="Unknown option 'nope' for chen-sqrtn; it takes none"):
        STRATEGIES["chen-sqrtn"].check_options({"nope": 1})


def test_a_knob_or_offload_option_must_be_declared() -> None:
    with pytest.raises(ValueError, match="option 'k' is used but not declared"):
        Strategy("x", "x", STRATEGIES["griewank"].run, knob="k")


def test_a_pinned_knob_is_the_one_value_tried() -> None:
    result = solve(chain(6), budget_ratio=1.0, strategy="griewank", options={"snapshots": 2})
    assert "snapshots=2" in result.log[-1] or any("snapshots=2" in line for line in result.log)
