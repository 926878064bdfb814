"""An engine-neutral mixed-integer linear program: plain NumPy arrays any backend can load.

The model is ``min c·x + offset`` subject to ``row_lower <= A x <= row_upper`` and
``lower <= x <= upper``, with ``x[integer]`` integral. ``A`` is stored row by row (CSR). Nothing
here imports a solver engine, so a model can be built, pickled to a solver process and checked
(:meth:`MilpModel.violation`) in the parent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

__all__ = ["MilpBuilder", "MilpModel"]


@dataclass(frozen=True, eq=False)
class MilpModel:
    """A MILP in arrays.

    ``start`` is an optional complete feasible assignment handed to the engine as a MIP start;
    ``watch`` lists the variables whose values travel with every incumbent the engine reports,
    so the caller can use an incumbent even if the engine is killed before it returns;
    ``relaxation`` marks an LP relaxation, whose continuous variables must stay continuous.
    """

    objective: np.ndarray
    objective_offset: float
    lower: np.ndarray
    upper: np.ndarray
    integer: np.ndarray
    row_start: np.ndarray
    row_index: np.ndarray
    row_value: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    start: np.ndarray | None = None
    watch: np.ndarray | None = None
    relaxation: bool = False
    name: str = "model"

    @property
    def n_vars(self) -> int:
        return int(self.objective.shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.row_lower.shape[0])

    @property
    def n_nonzeros(self) -> int:
        return int(self.row_value.shape[0])

    @property
    def n_integer(self) -> int:
        return int(self.integer.sum())

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Column indices and coefficients of row ``r``."""
        a, b = self.row_start[r], self.row_start[r + 1]
        return self.row_index[a:b], self.row_value[a:b]

    def activity(self, x: np.ndarray) -> np.ndarray:
        """``A x`` for every row."""
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.row_start))
        return np.bincount(rows, weights=self.row_value * x[self.row_index], minlength=self.n_rows)

    def objective_value(self, x: np.ndarray) -> float:
        return float(self.objective @ x + self.objective_offset)

    def absolute_gap(self, mip_gap: float) -> float | None:
        """An absolute gap that implies the relative ``mip_gap``, for engines that leave the constant out.

        When every cost and every lower bound is >= 0, the constant is a lower bound of the objective,
        so ``objective - bound <= mip_gap * constant`` implies ``<= mip_gap * objective``. None otherwise.
        """
        if self.objective_offset > 0 and np.all(self.objective >= 0) and np.all(self.lower >= 0):
            return mip_gap * self.objective_offset
        return None

    def violation(self, x: np.ndarray) -> float:
        """The largest amount by which ``x`` breaks a row, a bound or integrality (0 when feasible)."""
        act = self.activity(x)
        worst = [
            np.max(self.lower - x, initial=0.0),
            np.max(x - self.upper, initial=0.0),
            np.max(self.row_lower - act, initial=0.0),
            np.max(act - self.row_upper, initial=0.0),
            np.max(np.abs(x[self.integer] - np.round(x[self.integer])), initial=0.0),
        ]
        return float(max(worst))

    def scaled(self) -> tuple[MilpModel, np.ndarray]:
        """The same model with continuous variables scaled into [0, 1] and every row by its largest coefficient.

        Returns the scaled model and the column scales: a solution ``y`` of the scaled model is
        ``x = scales * y`` here. For engines whose LP solver struggles with the Checkmate model's
        memory rows (sizes up to 2**30 units, budgets beyond): SoPlex, in SCIP, otherwise stops its
        root LP early and SCIP declares a MIP start optimal.
        """
        scales = np.where(~self.integer & np.isfinite(self.upper) & (self.upper > 1), self.upper, 1.0)
        values = self.row_value * scales[self.row_index]
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.row_start))
        largest = np.zeros(self.n_rows)
        np.maximum.at(largest, rows, np.abs(values))
        largest[largest == 0] = 1.0
        model = replace(
            self, objective=self.objective * scales, lower=self.lower / scales, upper=self.upper / scales,
            row_value=values / largest[rows], row_lower=self.row_lower / largest, row_upper=self.row_upper / largest,
            start=None if self.start is None else self.start / scales,
        )
        return model, scales

    def relaxed(self) -> MilpModel:
        """The LP relaxation: the same model with every variable continuous."""
        return replace(self, integer=np.zeros_like(self.integer), relaxation=True, name=f"{self.name} (LP relaxation)")

    def with_start(self, start: np.ndarray | None) -> MilpModel:
        return replace(self, start=start)

    def describe(self) -> str:
        return (f"{self.name}: {self.n_vars} variables ({self.n_integer} integer), {self.n_rows} rows, "
                f"{self.n_nonzeros} nonzeros")


class MilpBuilder:
    """Collects variables and rows, then freezes them into a :class:`MilpModel`."""

    def __init__(self) -> None:
        self._lower: list[np.ndarray] = []
        self._upper: list[np.ndarray] = []
        self._integer: list[np.ndarray] = []
        self._cost: list[np.ndarray] = []
        self._n_vars = 0
        self._indices: list[list[int]] = []
        self._values: list[list[float]] = []
        self._row_lower: list[float] = []
        self._row_upper: list[float] = []

    @property
    def n_vars(self) -> int:
        return self._n_vars

    def add_variables(self, count: int, *, lower: float, upper: float, integer: bool,
                      cost: np.ndarray | float = 0.0) -> np.ndarray:
        """Add ``count`` variables with one bound and type; return their indices."""
        first = self._n_vars
        self._lower.append(np.full(count, lower, dtype=np.float64))
        self._upper.append(np.full(count, upper, dtype=np.float64))
        self._integer.append(np.full(count, integer, dtype=bool))
        self._cost.append(np.broadcast_to(np.asarray(cost, dtype=np.float64), (count,)).copy())
        self._n_vars += count
        return np.arange(first, first + count, dtype=np.int64)

    def add_row(self, indices: list[int], values: list[float], lower: float, upper: float) -> None:
        """Add ``lower <= sum(values[k] * x[indices[k]]) <= upper`` (use ±inf for a one-sided row)."""
        self._indices.append(indices)
        self._values.append(values)
        self._row_lower.append(lower)
        self._row_upper.append(upper)

    def build(self, *, objective_offset: float = 0.0, name: str = "model",
              watch: np.ndarray | None = None) -> MilpModel:
        lengths = np.fromiter((len(ix) for ix in self._indices), dtype=np.int64, count=len(self._indices))
        row_start = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=row_start[1:])
        flat_index = np.fromiter((i for ix in self._indices for i in ix), dtype=np.int64, count=int(row_start[-1]))
        flat_value = np.fromiter((v for vs in self._values for v in vs), dtype=np.float64, count=int(row_start[-1]))

        def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        return MilpModel(
            objective=cat(self._cost, np.float64),
            objective_offset=float(objective_offset),
            lower=cat(self._lower, np.float64),
            upper=cat(self._upper, np.float64),
            integer=cat(self._integer, bool),
            row_start=row_start,
            row_index=flat_index,
            row_value=flat_value,
            row_lower=np.asarray(self._row_lower, dtype=np.float64),
            row_upper=np.asarray(self._row_upper, dtype=np.float64),
            watch=watch,
            name=name,
        )
