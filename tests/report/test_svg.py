"""Memory over a step as SVG: a line per series across the whole width, the budget dashed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from remat.report import memory_svg
from remat.schedules import format_size

SVG = "{http://www.w3.org/2000/svg}"


def lines(svg: str) -> dict[str, list[tuple[float, float]]]:
    root = ET.fromstring(svg)
    return {p.get("data-series"): [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
            for p in root.iter(f"{SVG}polyline")}


def test_each_series_spans_the_width_and_its_peak_is_highest():
    planned, measured = [0, 4, 10, 6, 2], np.array([0, 3, 5, 11, 7, 3, 1, 0])
    svg = memory_svg({"planned": planned, "measured": measured}, budget=12, title="a <step>")
    drawn = lines(svg)
    assert set(drawn) == {"planned", "measured"}
    for name, values in (("planned", planned), ("measured", measured)):
        xs, ys = [x for x, _ in drawn[name]], [y for _, y in drawn[name]]
        assert len(xs) == 2 * len(values) and xs[0] == min(xs) and xs[-1] == max(xs)
        assert ys.index(min(ys)) // 2 == int(np.argmax(values)), "SVG's y grows downwards: the peak is the least y"
    assert drawn["planned"][0][0] == drawn["measured"][0][0] and drawn["planned"][-1][0] == drawn["measured"][-1][0]
    assert ET.fromstring(svg).find(f"{SVG}line[@data-series='budget']") is not None
    assert f"measured: peak {format_size(11)}" in svg and "a &lt;step&gt;" in svg


def test_a_long_series_is_drawn_with_its_peak_and_an_empty_one_is_left_out():
    long = np.zeros(100_000, dtype=np.int64)
    long[77_777] = 5
    drawn = lines(memory_svg({"measured": long, "planned": []}))
    assert set(drawn) == {"measured"} and len(drawn["measured"]) <= 2 * 1500
    assert min(y for _, y in drawn["measured"]) < max(y for _, y in drawn["measured"])
