"""Published results on the paper graphs, for the benchmark tables.

From the Moccasin paper (Bartan et al., "Moccasin: Efficient Tensor Rematerialization for Neural
Networks", ICML 2023), which reports its own CP-SAT model (16 workers) and the Checkmate MILP (Jain et
al., "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization", MLSys 2020) on
Gurobi, on the Checkmate paper's training graphs and Moccasin's random layered graphs (benchmarks/graphs).
"""

from __future__ import annotations

PUBLISHED: dict[tuple[str, float], tuple[str, str]] = {
    ("fcn8", 0.9): ("0.0 %, 6.3 s", "0.0 %, 3.1 s"),
    ("fcn8", 0.8): ("0.1 %, 5.6 s", "0.1 %, 3.1 s"),
    ("rl100", 0.9): ("0.8 %, 18.5 s", "0.8 %, 9.3 s"),
    ("rl100", 0.8): ("2.3 %, 22.7 s", "2.3 %, 9.5 s"),
    ("rl250", 0.9): ("0.9 %, 685 s", "0.9 %, 55 s"),
    ("rl250", 0.8): ("none in 1 h", "4.9 %, 640 s"),
    ("resnet50", 0.9): ("0.1 %, 434 s", "0.2 %, 65 s"),
    ("resnet50", 0.8): ("0.3 %, 485 s", "0.3 %, 69 s"),
    ("rl500", 0.9): ("none in 1 h", "0.7 %, 1,803 s"),
    ("rl500", 0.8): ("none in 1 h", "3.4 %, 1,805 s"),
    ("rl1000", 0.9): ("none in 1 h", "0.7 %, 3,613 s"),
    ("rl1000", 0.8): ("none in 1 h", "3.4 %, 3,612 s"),
}
"""(graph, ratio): (Checkmate MILP with Gurobi, Moccasin with CP-SAT on 16 workers): overhead, time."""
