"""Memory over a step as one SVG file: lines that need no browser script and no plotting library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

import numpy as np

from remat.schedules import format_size

from ._envelope import memory_envelope

__all__ = ["memory_svg"]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
"""The lines' colors, in the order of the series."""
WIDTH, HEIGHT = 760, 340
LEFT, RIGHT, TOP, BOTTOM = 90, 20, 36, 80
"""Margins around the plot area, in pixels: room for the axes' labels and the legend."""


def memory_svg(series: Mapping[str, Sequence[int] | np.ndarray], *, budget: int | None = None,
               title: str = "") -> str:
    """An SVG drawing each of ``series`` (bytes after each of its steps, by name) as a stepped line across the
    width, so series of different lengths (a plan's statements, the ops a run dispatched) span the same step,
    with ``budget`` as a dashed line. Each line is a ``<polyline>`` whose ``data-series`` is its name."""
    lines = {name: np.asarray(values, dtype=np.int64) for name, values in series.items() if len(values)}
    top = max([int(v.max()) for v in lines.values()] + [budget or 0, 1]) * 1.05
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def y(b: float) -> float:
        return TOP + h - h * b / top

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<title>{escape(title or "memory over the step")}</title>',
           f'<text x="{LEFT}" y="20" font-size="14">{escape(title)}</text>' if title else "",
           f'<rect x="{LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    for k in range(5):
        b = top * k / 4
        out.append(f'<line x1="{LEFT - 4}" x2="{LEFT + w}" y1="{y(b):.1f}" y2="{y(b):.1f}" stroke="#eee"/>'
                   f'<text x="{LEFT - 8}" y="{y(b) + 4:.1f}" text-anchor="end">{escape(format_size(int(b)))}</text>')
    out.append(f'<text x="{LEFT + w / 2}" y="{TOP + h + 20}" text-anchor="middle">through the step '
               f'(each line over its own steps)</text>')
    if budget is not None:
        out.append(f'<line data-series="budget" x1="{LEFT}" x2="{LEFT + w}" y1="{y(budget):.1f}" '
                   f'y2="{y(budget):.1f}" stroke="#7f7f7f" stroke-dasharray="6 4"/>')
    legend = [(f"budget {format_size(budget)}", "#7f7f7f")] if budget is not None else []
    for (name, values), color in zip(lines.items(), COLORS, strict=False):
        steps, memory = memory_envelope(values)
        xs = LEFT + w * np.append(steps, len(values)) / len(values)
        ys = [y(b) for b in memory.tolist()]
        points = " ".join(f"{xs[i]:.1f},{ys[i]:.1f} {xs[i + 1]:.1f},{ys[i]:.1f}" for i in range(len(ys)))
        out.append(f'<polyline data-series="{escape(name)}" fill="none" stroke="{color}" stroke-width="1.5" '
                   f'points="{points}"/>')
        legend.append((f"{name}: peak {format_size(int(values.max()))}", color))
    for k, (text, color) in enumerate(legend):
        x, ly = LEFT + 250 * (k % 3), TOP + h + 42 + 18 * (k // 3)
        out.append(f'<line x1="{x}" x2="{x + 20}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>'
                   f'<text x="{x + 26}" y="{ly}">{escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(part for part in out if part)
