"""Exhaustive optima on tiny graphs, written independently of the solvers, for checking them.

``stage_optimum`` searches every Checkmate schedule: every lower-triangular retention matrix S
(S[t] holds nodes before t) with R the minimal recomputation closure, run with values freed as
early as possible. Stage costs and peaks depend only on (S[t], S[t+1]), so the search is a dynamic
program over stages that still visits every S[t] at every stage.

``plan_optimum`` searches every plan of the memory model of docs/plans.md whose first computations come in
node order (recomputations anywhere, any number of times): a shortest path over states (resident
set, number of nodes computed so far).

``offload_optimum`` searches every offload-only plan of a simple form: each node computed once, in node
order; wherever a value waits unread between two computes, it is either kept or moved to the host right
after the compute before the gap and reloaded before any compute of the gap; each plan is simulated.

The named graphs at the end are tiny cases whose optima these searches establish.
"""

from __future__ import annotations

import heapq
import math
from itertools import combinations, pairwise, product

from factories import graph_doc

from remat.schedules import Graph, Op, Plan, Transfer, simulate


def stage_optimum(graph: Graph, budget: int) -> float:
    """The cheapest cost of a Checkmate schedule within ``budget``; math.inf if none fits."""
    return stage_optima(graph, [budget])[0]


def stage_optima(graph: Graph, budgets: list[int]) -> list[float]:
    """:func:`stage_optimum` for several budgets, evaluating every stage transition once."""
    n = graph.size
    transitions = [
        [(held, keep, *_stage(graph, t, held, keep))
         for held in _subsets(range(t)) for keep in (_subsets(range(t + 1)) if t < n - 1 else [frozenset()])]
        for t in range(n)
    ]
    optima = []
    for budget in budgets:
        best_from: dict[frozenset[int], float] = {frozenset(): 0.0}
        for t in range(n - 1, -1, -1):
            best_here: dict[frozenset[int], float] = {}
            for held, keep, cost, peak in transitions[t]:
                if peak <= budget and keep in best_from:
                    best_here[held] = min(best_here.get(held, math.inf), cost + best_from[keep])
            best_from = best_here
        optima.append(best_from.get(frozenset(), math.inf))
    return optima


def plan_optimum(graph: Graph, budget: int) -> float:
    """The cheapest plan within ``budget`` whose first computations follow node order; math.inf if none."""
    n, mem, deps = graph.size, graph.memory.tolist(), graph.deps
    done: set[tuple[int, int]] = set()
    queue: list[tuple[float, int, int]] = [(0.0, 0, 0)]
    while queue:
        cost, resident, first = heapq.heappop(queue)
        if (resident, first) in done:
            continue
        done.add((resident, first))
        if first == n:
            return cost
        used = graph.fixed_memory + sum(mem[v] for v in range(n) if resident >> v & 1)
        for v in range(first + 1):
            if resident >> v & 1 or any(not resident >> u & 1 for u in deps[v]):
                continue
            if used + mem[v] <= budget:
                heapq.heappush(queue, (cost + float(graph.cost[v]), resident | 1 << v, max(first, v + 1)))
        for u in range(first):
            if resident >> u & 1:
                heapq.heappush(queue, (cost, resident & ~(1 << u), first))
    return math.inf


def offload_optimum(graph: Graph, budget: int, transfer: Transfer) -> float:
    """The cheapest offload-only plan of the form in the module docstring within ``budget``; math.inf if none."""
    touches = [[v, *graph.users[v]] for v in range(graph.size)]
    gaps = [(v, a, b) for v in range(graph.size) for a, b in pairwise(touches[v]) if b - a > 1]
    best = math.inf
    for reloads in product(*[[None, *range(a + 1, b + 1)] for _, a, b in gaps]):
        simulation = simulate(graph, _offload_plan(graph, gaps, reloads), transfer=transfer)
        if simulation.peak_memory <= budget:
            best = min(best, simulation.cost)
    return best


def _offload_plan(graph: Graph, gaps: list[tuple[int, int, int]], reloads: tuple[int | None, ...]) -> Plan:
    """Checkpoint-all's plan with the chosen gaps moved: out after the compute before, back before ``reloads[k]``."""
    leaving: dict[int, list[tuple[Op, int]]] = {}
    arriving: dict[int, list[tuple[Op, int]]] = {}
    on_host: set[int] = set()
    for (v, a, _), back in zip(gaps, reloads, strict=True):
        if back is None:
            continue
        leaving.setdefault(a, []).append(("free" if v in on_host else "offload", v))
        arriving.setdefault(back, []).append(("reload", v))
        on_host.add(v)
    dying: dict[int, list[int]] = {}
    for v, last in enumerate(graph.last_use):
        dying.setdefault(last, []).append(v)
    steps: list[tuple[Op, int]] = []
    for k in range(graph.size):
        steps += [*arriving.get(k, []), ("compute", k), *leaving.get(k, [])]
        steps += [("free", v) for v in dying.get(k, [])]
    return Plan.of(steps)


def _subsets(items: range) -> list[frozenset[int]]:
    pool = list(items)
    return [frozenset(c) for k in range(len(pool) + 1) for c in combinations(pool, k)]


def _stage(graph: Graph, t: int, held: frozenset[int], keep: frozenset[int]) -> tuple[float, float]:
    """Cost and peak of stage t that starts with ``held`` resident and ends with ``keep`` (inf if impossible)."""
    deps, mem = graph.deps, graph.memory.tolist()
    needed: set[int] = set()
    todo = [t, *(keep - held)]
    while todo:
        v = todo.pop()
        if v in needed:
            continue
        needed.add(v)
        todo.extend(u for u in deps[v] if u not in held and u not in needed)
    order = sorted(needed)
    readers = {u: [v for v in order if u in deps[v]] for u in set(held) | needed}
    resident = {u for u in held if readers[u] or u in keep}
    peak = -math.inf
    for v in order:
        resident.add(v)
        peak = max(peak, graph.fixed_memory + sum(mem[u] for u in resident))
        for u in (*deps[v], v):
            if u in resident and u not in keep and all(w <= v for w in readers[u]):
                resident.discard(u)
    if resident != set(keep):
        return math.inf, math.inf
    return float(sum(graph.cost[v] for v in order)), peak


STAGE_FORM_GAP = Graph.from_json(graph_doc([
    {"id": "n0", "deps": [], "cost": 10.0, "memory": 24},
    {"id": "n1", "deps": ["n0"], "cost": 2.0, "memory": 42},
    {"id": "n2", "deps": [], "cost": 1.0, "memory": 45},
    {"id": "n3", "deps": ["n1", "n2"], "cost": 3.5, "memory": 10},
    {"id": "n4", "deps": ["n0", "n1", "n2"], "cost": 0.0, "memory": 13},
    {"id": "n5", "deps": ["n0", "n3", "n4"], "cost": 3.5, "memory": 49},
], name="stage-form-gap"))
"""Plans fit from 124 bytes (cost 33.5) but schedules of Checkmate's stage form only from 134 (the
checkpoint-all peak): under 134 the last stage must recompute n0 and n3, and index order puts n0
(24 bytes) first while n1, n2 and n4 are held, which needs 134 bytes; a plan frees n0, recomputes
n3, then recomputes n0, and stays within 124."""

STAGE_INFEASIBLE = Graph.from_json(graph_doc([
    {"id": "n0", "deps": [], "cost": 10.0, "memory": 31},
    {"id": "n1", "deps": ["n0"], "cost": 0.0, "memory": 5},
    {"id": "n2", "deps": ["n0"], "cost": 1.0, "memory": 34},
    {"id": "n3", "deps": ["n1"], "cost": 2.0, "memory": 38},
    {"id": "n4", "deps": ["n1", "n2"], "cost": 2.0, "memory": 7},
], name="stage-infeasible", fixed_memory=9))
"""min_feasible_budget is 74, yet nothing fits under 79 (plans or schedules): a solver must prove it."""

SMALL_DAG = Graph.from_json(graph_doc([
    {"id": "a", "deps": [], "cost": 3.5, "memory": 12},
    {"id": "b", "deps": ["a"], "cost": 1.0, "memory": 19},
    {"id": "c", "deps": ["a", "b"], "cost": 1.0, "memory": 30},
    {"id": "d", "deps": ["a", "b"], "cost": 10.0, "memory": 25},
    {"id": "e", "deps": ["b", "d"], "cost": 10.0, "memory": 50},
    {"id": "f", "deps": ["c"], "cost": 3.5, "memory": 40},
    {"id": "g", "deps": ["e"], "cost": 1.0, "memory": 13},
], name="small-dag", fixed_memory=7))
"""Seven nodes whose optimum changes seven times between the feasible minimum (101) and checkpoint-all."""
