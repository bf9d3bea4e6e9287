"""The charts of report.html one module at a time: typed data in, SVG (drawn by matplotlib) that parses as XML,
draws each mark, keeps its text as text, and, in a real headless Chromium, keeps its labels clear of each other."""

import dataclasses
import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from edgeprune.importance.base import HeadScores
from edgeprune.report import render_html
from edgeprune.report.plots import generation, head_scores, kept_heads, latency, pareto
from edgeprune.report.plots.base import BUDGET, CHOSEN, DENSE, MUTED
from edgeprune.report.plots.canvas import rounded
from tests.browser import DevTools, chromium_executable, needs_chromium, pixels_near, png_pixels
from tests.test_report_html import HEADS, LAYERS, fit_result

SVG = "{http://www.w3.org/2000/svg}"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
HOSTILE = '<script>alert("x")</script> & co $x$'  # markup, an entity and mathtext: all must stay plain text


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def marks(root: ET.Element, css_class: str) -> list[ET.Element]:
    """The groups a chart gave that class (matplotlib draws each mark in a `<g>` named by its gid)."""
    return [e for e in root.iter(f"{SVG}g") if e.get("class") == css_class]


def texts(root: ET.Element) -> list[str]:
    return ["".join(e.itertext()) for e in root.iter() if e.tag in (f"{SVG}text", f"{SVG}title")]


def legend_texts(root: ET.Element) -> list[str]:
    """The entries of the chart's legend, in order (matplotlib names its group `legend_1`)."""
    return [t for g in root.iter(f"{SVG}g") if g.get("id", "").endswith("-legend_1")
            for t in ("".join(e.itertext()) for e in g.iter(f"{SVG}text"))]


def tooltip(group: ET.Element) -> str:
    return group.find(f"{SVG}title").text


def uses(group: ET.Element) -> list[ET.Element]:
    """The markers matplotlib placed in a group: `<use>` of a marker defined once."""
    return list(group.iter(f"{SVG}use"))


def scatter(x_limit: float | None = 12.0, y_limit: float | None = 0.94, points: tuple = ()) -> pareto.ScatterData:
    points = points or (
        pareto.ScatterPoint("dense baseline (fp32)", 30.0, 0.953, dense=True),
        pareto.ScatterPoint("int8, 0 heads removed", 14.0, 0.950, on_front=True),
        pareto.ScatterPoint(f"fitted: {HOSTILE}", 11.0, 0.944, on_front=True, chosen=True),
        pareto.ScatterPoint("int8, 14 heads removed", 9.0, 0.902, estimated=True),
    )
    return pareto.ScatterData("plot-quality-latency", "Validation accuracy against latency p50", "latency p50 (ms)",
                              "accuracy", HOSTILE, points, ("fp32, 14 heads removed",), x_limit=x_limit,
                              y_limit=y_limit, x_unit="ms")


def test_budget_labels_are_rounded_to_three_significant_digits_without_an_exponent():
    assert [rounded(v) for v in (0.8, 0.80000001, 12, 12.3456, 1234.5, 0.012345, 99.95, 0)] == \
        ["0.8", "0.8", "12", "12.3", "1234", "0.0123", "100", "0"]


def test_the_pareto_chart_draws_one_marker_per_artifact_the_budgets_with_units_and_a_legend_of_what_is_drawn():
    data = scatter()
    root = parse(pareto.render(data))
    points = [g for g in root.iter(f"{SVG}g") if g.get("class", "").startswith("point")]
    assert [g.get("class") for g in points] == ["point", "point", "point front", "point front chosen"]
    assert [len(uses(g)) for g in points] == [1, 1, 1, 1]
    assert len(marks(root, "chosen-ring")) == 1 and len(marks(root, "budget")) == 2
    assert len(marks(root, "feasible")) == 1
    assert tooltip(points[-1]).startswith(f"fitted: {HOSTILE}: latency p50 (ms) 11 (measured)")
    assert "floor 94.00 %" in texts(root) and "budget 12 ms" in texts(root)
    assert {"latency p50 (ms)", "accuracy (validation)", HOSTILE, "dense"} <= set(texts(root))  # axis titles, labels
    legend = legend_texts(root)
    # no point is off the front and measured, so there is no "other candidate" entry
    assert legend == ["Pareto front", "latency p50 estimated", HOSTILE, "dense baseline", "meets the budgets drawn"]
    assert data.caption == ("Validation accuracy against latency p50. "
                            "Not plotted (not measured): fp32, 14 heads removed.")
    assert pareto.figure(pareto.ScatterData("plot-quality-size", "t", "x", "accuracy", "fitted", ())).empty == \
        "Nothing to plot. t. "
    bare = parse(pareto.render(scatter(x_limit=None, y_limit=None, points=(
        pareto.ScatterPoint("int8", 10.0, 0.9), pareto.ScatterPoint("fp32", 20.0, 0.95, on_front=True)))))
    assert marks(bare, "budget") == [] and marks(bare, "feasible") == [] and marks(bare, "chosen-ring") == []
    assert legend_texts(bare) == ["Pareto front", "other candidate"]


def test_chart_text_is_svg_text_with_ids_unique_to_its_chart_and_nothing_embedded():
    svg = pareto.render(scatter())
    root = parse(svg)
    assert root.get("id") == "plot-quality-latency" and svg.startswith('<svg id="plot-quality-latency" class="plot"')
    assert len(list(root.iter(f"{SVG}text"))) > 10 and "<image" not in svg and "data:" not in svg
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert ids and all(i.startswith("plot-quality-latency") for i in ids) and len(ids) == len(set(ids))
    references = [e.get(XLINK_HREF) for e in root.iter() if e.get(XLINK_HREF)] + \
        re.findall(r"url\(#([^)]+)\)", svg)
    assert references and all(r.lstrip("#") in ids for r in references)  # every reference resolves in the chart
    assert svg == pareto.render(scatter())  # the same data, the same bytes


def test_the_pareto_data_comes_from_the_fit_and_names_what_it_leaves_out():
    result = fit_result()
    data = pareto.quality_latency(result)
    assert len(data.points) == 4 and sum(p.chosen for p in data.points) == 1 and sum(p.dense for p in data.points) == 1
    assert data.left_out == ("fp32, 14 heads removed",) and data.x_limit is None and data.higher_is_better
    assert (pareto.quality_size(result).x_limit, pareto.quality_size(result).x_unit, data.x_unit) == (20, "MB", "ms")


def test_the_heat_map_has_one_cell_per_head_greys_a_head_removed_before_scoring_and_labels_its_colour_bar():
    data = head_scores.HeadScoreData(((0.1, 0.5, 0.9), (0.3, None, 0.7)), "taylor-output-proj", 64, True)
    root = parse(head_scores.render(data))
    cells = marks(root, "cell")
    assert len(cells) == 6 and "layer 1, head 1: removed before scoring" in [tooltip(c) for c in cells]
    fills = [re.search(r"fill: (#\w+)", c.find(f"{SVG}path").get("style")).group(1) for c in cells]
    assert fills.count(head_scores.REMOVED) == 1 and fills[0] == "#440154" and fills[2] == "#fde725"  # viridis ends
    assert "importance score (taylor-output-proj, normalized per layer)" in texts(root)
    assert len(marks(root, "colour-scale")) == 1 and legend_texts(root) == ["removed before scoring"]
    assert {"attention head", "layer 0", "layer 1"} <= set(texts(root))
    assert data.caption.startswith("Head importance (taylor-output-proj), layers × heads, normalized per layer: "
                                   "measured on 64 calibration examples.")
    assert legend_texts(parse(head_scores.render(
        head_scores.HeadScoreData(((0.1, 0.5),), "taylor", 8)))) == []  # no grey cell, no legend
    scores = head_scores.head_score_data(fit_result().head_scores)
    assert len(scores.scores) == LAYERS and {len(row) for row in scores.scores} == {HEADS}
    assert head_scores.figure(head_scores.head_score_data(HeadScores(np.full((1, 2), np.nan), "taylor", 0))).empty == \
        "No head importance scores recorded."


def test_the_kept_heads_map_has_one_cell_per_head_and_marks_a_removed_layer():
    data = kept_heads.KeptHeadsData((4, 4, 4), ((0, 2, 3), (), (1,)), frozenset({1}), "global-topk", "taylor")
    root = parse(kept_heads.render(data))
    kept, removed = marks(root, "kept"), marks(root, "removed")
    assert len(kept) == 4 and len(removed) == 8
    assert {re.search(r"fill: (#\w+)", k.find(f"{SVG}path").get("style")).group(1) for k in kept} == {CHOSEN}
    assert "layer 1 (removed)" in texts(root)
    assert [t for t in texts(root) if re.fullmatch(r"\d+/\d+", t)] == ["3/4", "0/4", "1/4"]
    assert "kept / heads" in texts(root) and "removed" in texts(root)
    assert data.caption == "Heads the fitted artifact keeps, per layer: 4 of 12 heads kept (global-topk over taylor)."
    all_kept = parse(kept_heads.render(kept_heads.KeptHeadsData((2,), ((0, 1),))))
    assert legend_texts(root) == ["kept", "removed"] and legend_texts(all_kept) == ["kept"]  # only what is drawn
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
    assert [len(uses(g)) for g in marks(root, "samples")] == [5, 3] and len(marks(root, "box")) == 2
    (diamond,) = marks(root, "aggregate")
    assert f"fill: {MUTED}" in diamond.find(f".//{SVG}use").get("style")
    boxes = [re.search(r"fill: (#\w+)", b.find(f"{SVG}path").get("style")).group(1) for b in marks(root, "box")]
    assert boxes == [DENSE, CHOSEN]
    (budget,) = marks(root, "budget")
    assert f"stroke: {BUDGET}" in budget.find(f"{SVG}path").get("style") and "budget p50 12 ms" in texts(root)
    assert f"fitted: {HOSTILE}: p50 11.00 ms, n=3" in [tooltip(b) for b in marks(root, "box")]
    assert {"p50 11.00 ms, n=3", "p50 9.00 ms", "latency per inference (ms)"} <= set(texts(root))
    legend = legend_texts(root)
    assert legend == ["dense baseline", "fitted", "other finalist", "p50 only (no samples)"]
    assert "on pi5 (executorch, 4 threads)" in data.caption
    assert latency.figure(latency.LatencyData((), 50)).empty.startswith("No artifact was benchmarked")
    assert latency.figure(latency.LatencyData((latency.LatencyRow("x", (), None),), 50)).empty == \
        "The benchmarks recorded no latency figure."
    from_fit = latency.latency_data(fit_result())
    assert len(from_fit.rows) == 4 and sum(r.chosen for r in from_fit.rows) == 1


def test_the_generation_chart_draws_decode_speed_by_depth_and_the_kv_cache_by_context():
    from edgeprune.generation.bench import DecodeSpeed, GenerationBenchmark

    bench = GenerationBenchmark("model.pte", 2, 512, 128, 40.0, 150.0, 5,
                                [DecodeSpeed(128, 60, 1.2), DecodeSpeed(256, 55, 1.25), DecodeSpeed(384, 50, 1.3)],
                                300.0, 180.0, 23_592_960, "pi5-emulated", "emulated (QEMU user mode on x86_64)")
    result = dataclasses.replace(fit_result(), generation=bench)
    result.budget = dataclasses.replace(result.budget, min_decode_tps=30.0)
    data = generation.generation_data(result)
    assert data.depths == (128, 256, 384) and data.tokens_per_s == (50.0, 44.0, 50 / 1.3)
    assert data.kv_mb_per_token == 23_592_960 / 512 / 1e6  # 46,080 bytes a token: SmolLM2's 30 layers of 3 KV heads
    root = parse(generation.render(data))
    (decode,) = marks(root, "decode")
    assert "50 tokens/s at depth 128" in tooltip(decode) and len(uses(decode)) == 3
    (kv,) = marks(root, "kv-cache")
    assert tooltip(kv) == "46,080 bytes a token" and f"stroke: {CHOSEN}" in kv.find(f".//{SVG}path").get("style")
    assert "the program added 180 MB to its process" == tooltip(marks(root, "program")[0])
    assert "budget 30 tokens/s" in texts(root) and legend_texts(root) == ["KV cache (exact)", "program, measured"]
    assert "emulated (QEMU user mode on x86_64)" in data.caption and "23.6 MB at the program's context of 512" in \
        data.caption
    page = render_html(result)
    assert 'id="plot-generation"' in page
    assert generation.generation_data(fit_result()) is None and 'id="plot-generation"' not in render_html(fit_result())
    assert generation.figure(None).empty.startswith("No generation benchmark was run")


def test_strings_from_the_user_are_escaped_in_the_page_and_its_figures():
    result = fit_result(task={"name": HOSTILE, "kind": "classification", "model_path": "/models/a&b <x>"},
                        reproduce={"command": f"edgeprune fit --task '{HOSTILE}'", "runtime": "executorch"})
    result.fitted.label = HOSTILE
    page = render_html(result)
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "/models/a&amp;b &lt;x&gt;" in page and "a&b" not in page
    assert "<title>edgeprune fit: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co $x$ on host</title>" in page
    for svg in re.findall(r"<svg .*?</svg>", page, re.S):
        parse(svg)  # well-formed: nothing the user wrote broke out of its text node
    assert any(HOSTILE in t for t in texts(parse(re.search(r'<svg id="plot-quality-size".*?</svg>', page,
                                                                   re.S).group(0))))


# ---- in a real headless browser: what a reader sees ------------------------------------------------------------

TEXT_BOXES = """JSON.stringify([...document.querySelectorAll('svg.plot text')].map(t => {
  const r = t.getBoundingClientRect(), g = t.closest('g[id]');
  return {svg: t.closest('svg').id, group: g ? g.id : '', text: t.textContent,
          x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
}).filter(b => b.x1 > b.x0))"""


def clash(a: dict, b: dict) -> bool:
    return a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    devtools = DevTools(chromium_executable(), tmp_path_factory.mktemp("chromium-profile"))
    yield devtools
    devtools.close()


@needs_chromium
def test_in_chromium_the_fitted_label_keeps_clear_of_the_budget_labels_where_it_would_fall_on_them(browser,
                                                                                                   tmp_path):
    # the fitted point just above the quality floor and left of the floor's label: up and to the right of its
    # marker, where a label goes first, the fitted label would sit on "floor 95.00 %"
    points = (pareto.ScatterPoint("dense baseline (fp32)", 30.0, 0.96, dense=True),
              pareto.ScatterPoint("int8, 0 heads removed", 8.0, 0.90, on_front=True),
              pareto.ScatterPoint("fitted", 22.0, 0.952, on_front=True, chosen=True))
    data = dataclasses.replace(scatter(x_limit=25.0, y_limit=0.95, points=points), chosen_label="fitted (int8-dynamic)")
    page = tmp_path / "chart.html"
    page.write_text(f"<!doctype html><html><body style='margin:0'>{pareto.render(data)}</body></html>")
    opened = browser.open(page)
    assert opened.errors() == []
    boxes = {b["group"]: b for b in json.loads(opened.evaluate(TEXT_BOXES))}
    fitted, budget, floor = (boxes[f"plot-quality-latency-{name}"] for name in
                             ("label-chosen", "label-budget-x", "label-budget-y"))
    assert (fitted["text"], budget["text"], floor["text"]) == ("fitted (int8-dynamic)", "budget 25 ms", "floor 95.00 %")
    assert not clash(fitted, budget) and not clash(fitted, floor) and not clash(budget, floor), (fitted, budget, floor)
    for label, ink in ((fitted, CHOSEN), (budget, BUDGET)):  # and each is painted where the browser put it
        shot = png_pixels(opened.screenshot({"x": label["x0"], "y": label["y0"], "width": label["x1"] - label["x0"],
                                             "height": label["y1"] - label["y0"]}))
        assert pixels_near(shot, ink, tolerance=40) >= 10, label


@needs_chromium
def test_in_chromium_no_two_labels_of_any_report_chart_overlap(browser, tmp_path):
    """Axis titles clear of tick labels, legends clear of the axes, budget and point labels clear of each other."""
    report = tmp_path / "report.html"
    report.write_text(render_html(fit_result()))
    opened = browser.open(report)
    boxes = json.loads(opened.evaluate(TEXT_BOXES))
    assert {b["svg"] for b in boxes} == {"plot-quality-latency", "plot-quality-size", "plot-head-importance",
                                         "plot-kept-heads", "plot-latency"}
    clashes = [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if clash(a, b)]
    assert clashes == []
    assert {"latency p50 (ms)", "file size (MB)", "budget 20 MB", "latency per inference (ms)"} <= \
        {b["text"] for b in boxes}

