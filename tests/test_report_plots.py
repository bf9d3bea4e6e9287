"""The charts of report.html one module at a time: typed data in, SVG that parses as XML and draws each mark out."""

import re
import xml.etree.ElementTree as ET

import numpy as np

from edgeprune.importance.base import HeadScores
from edgeprune.report import render_html
from edgeprune.report.plots import head_scores, kept_heads, latency, pareto
from edgeprune.report.plots.base import BUDGET, CHOSEN, DENSE, FRONT, MUTED
from tests.test_report_html import HEADS, LAYERS, fit_result

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script> & co'


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def marks(root: ET.Element, tag: str, css_class: str | None = None) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}{tag}") if css_class is None or e.get("class") == css_class]


def texts(root: ET.Element) -> list[str]:
    return ["".join(e.itertext()) for e in root.iter() if e.tag in (f"{SVG}text", f"{SVG}title")]


def test_the_pareto_chart_draws_one_marker_per_artifact_and_the_budgets():
    points = (
        pareto.ScatterPoint("dense baseline (fp32)", 30.0, 0.953, dense=True),
        pareto.ScatterPoint("int8, 0 heads removed", 14.0, 0.950, on_front=True),
        pareto.ScatterPoint(f"fitted: {HOSTILE}", 11.0, 0.944, on_front=True, chosen=True),
        pareto.ScatterPoint("int8, 14 heads removed", 9.0, 0.902, estimated=True),
    )
    data = pareto.ScatterData("plot-quality-latency", "Validation accuracy against latency p50", "latency p50 (ms)",
                              "accuracy", HOSTILE, points, ("fp32, 14 heads removed",), x_limit=12.0, y_limit=0.94)
    root = parse(pareto.render(data))
    groups = marks(root, "g")
    point_groups = [g for g in groups if g.get("class", "").startswith("point")]
    assert [g.get("class") for g in point_groups] == ["point", "point", "point front", "point front chosen"]
    candidates = [c for g in point_groups for c in g.findall(f"{SVG}circle") if c.get("class") != "chosen-ring"]
    assert len(candidates) == 3  # one circle per candidate; the dense baseline is a square
    assert [c.get("fill") for c in candidates].count(FRONT) == 2 and candidates[0].get("stroke-dasharray") == "2 2"
    assert len(marks(root, "circle", "chosen-ring")) == 1 and point_groups[0].find(f"{SVG}rect").get("fill") == DENSE
    assert len(marks(root, "line", "budget")) == 2 and len(marks(root, "rect", "feasible")) == 1
    assert any(t.startswith(f"fitted: {HOSTILE}: latency p50 (ms) 11") for t in texts(root))
    assert "floor 94.00 %" in texts(root) and "budget 12" in texts(root)
    assert data.caption == ("Validation accuracy against latency p50. "
                            "Not plotted (not measured): fp32, 14 heads removed.")
    assert pareto.figure(pareto.ScatterData("plot-quality-size", "t", "x", "accuracy", "fitted", ())).empty == \
        "Nothing to plot. t. "


def test_the_pareto_data_comes_from_the_fit_and_names_what_it_leaves_out():
    result = fit_result()
    data = pareto.quality_latency(result)
    assert len(data.points) == 4 and sum(p.chosen for p in data.points) == 1 and sum(p.dense for p in data.points) == 1
    assert data.left_out == ("fp32, 14 heads removed",) and data.x_limit is None and data.higher_is_better
    assert pareto.quality_size(result).x_limit == 20


def test_the_heat_map_has_one_cell_per_head_and_greys_a_head_removed_before_scoring():
    data = head_scores.HeadScoreData(((0.1, 0.5, 0.9), (0.3, None, 0.7)), "taylor-output-proj", 64, True)
    root = parse(head_scores.render(data))
    cells = marks(root, "rect", "cell")
    assert len(cells) == 6 and [c.get("fill") for c in cells].count(head_scores.REMOVED) == 1
    assert "layer 1, head 1: removed before scoring" in texts(root)
    assert len(marks(root, "stop")) == 11  # the colour scale
    assert data.caption.startswith("Head importance (taylor-output-proj), layers × heads, normalized per layer: "
                                   "measured on 64 calibration examples.")
    scores = head_scores.head_score_data(fit_result().head_scores)
    assert len(scores.scores) == LAYERS and {len(row) for row in scores.scores} == {HEADS}
    assert head_scores.figure(head_scores.head_score_data(HeadScores(np.full((1, 2), np.nan), "taylor", 0))).empty == \
        "No head importance scores recorded."


def test_the_kept_heads_map_has_one_cell_per_head_and_marks_a_removed_layer():
    data = kept_heads.KeptHeadsData((4, 4, 4), ((0, 2, 3), (), (1,)), frozenset({1}), "global-topk", "taylor")
    root = parse(kept_heads.render(data))
    kept, removed = marks(root, "rect", "kept"), marks(root, "rect", "removed")
    assert len(kept) == 4 and len(removed) == 8 and {r.get("fill") for r in kept} == {CHOSEN}
    assert "layer 1 (removed)" in texts(root) and ["3/4", "0/4", "1/4"] == [t for t in texts(root) if "/" in t]
    assert data.caption == "Heads the fitted artifact keeps, per layer: 4 of 12 heads kept (global-topk over taylor)."
    fitted = kept_heads.kept_heads_data(fit_result().fitted)
    assert sum(map(len, fitted.kept_heads)) == LAYERS * HEADS - 8
    assert kept_heads.figure(kept_heads.KeptHeadsData((), ())).empty == "The fitted artifact records no head plan."


def test_the_latency_chart_draws_every_sample_a_box_per_sampled_row_and_a_diamond_for_aggregates():
    rows = (
        latency.LatencyRow("dense baseline (fp32)", (30.0, 31.5, 29.0, 30.2, 33.0), 30.2, dense=True),
        latency.LatencyRow(f"fitted: {HOSTILE}", (11.0, 11.4, 10.8), 11.0, chosen=True, on_front=True),
        latency.LatencyRow("int8, 14 heads removed (estimated)", (), 9.0),
    )
    data = latency.LatencyData(rows, 50, 12.0, "pi5", "executorch", 4)
    root = parse(latency.render(data))
    assert len(marks(root, "circle", "sample")) == 8 and len(marks(root, "rect", "box")) == 2
    (diamond,) = marks(root, "path", "aggregate")
    assert diamond.get("fill") == MUTED and {b.get("fill") for b in marks(root, "rect", "box")} == {DENSE, CHOSEN}
    (budget,) = marks(root, "line", "budget")
    assert budget.get("stroke") == BUDGET and "budget p50 12 ms" in texts(root)
    assert len(marks(root, "g", "finalist")) == 3 and f"fitted: {HOSTILE}: p50 11.00 ms, n=3" in texts(root)
    assert "on pi5 (executorch, 4 threads)" in data.caption
    assert latency.figure(latency.LatencyData((), 50)).empty.startswith("No artifact was benchmarked")
    assert latency.figure(latency.LatencyData((latency.LatencyRow("x", (), None),), 50)).empty == \
        "The benchmarks recorded no latency figure."
    from_fit = latency.latency_data(fit_result())
    assert len(from_fit.rows) == 4 and sum(r.chosen for r in from_fit.rows) == 1


def test_strings_from_the_user_are_escaped_in_the_page_and_its_figures():
    result = fit_result(task={"name": HOSTILE, "kind": "classification", "model_path": "/models/a&b <x>"},
                        reproduce={"command": f"edgeprune fit --task '{HOSTILE}'", "runtime": "executorch"})
    result.fitted.label = HOSTILE
    page = render_html(result)
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "/models/a&amp;b &lt;x&gt;" in page and "a&b" not in page
    assert "<title>edgeprune fit: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co on host</title>" in page
    for svg in re.findall(r"<svg .*?</svg>", page, re.S):
        parse(svg)  # well-formed: nothing the user wrote broke out of its text node
    assert any(HOSTILE in t for t in texts(parse(re.search(r'<svg id="plot-quality-size".*?</svg>', page,
                                                                   re.S).group(0))))
