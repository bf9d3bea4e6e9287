"""report.html: content and escaping here; rendering, console errors and drawn figures in a real headless Chromium.

The browser is driven over the DevTools protocol on `--remote-debugging-pipe` (file descriptors 3 and 4,
NUL-terminated JSON), so the test needs only the standard library and Debian's `chromium` package.
"""

import dataclasses
import html
import json
import math
import re

import numpy as np
import pytest

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.export.verify import Verification
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.structure import StructurePlan
from edgeprune.quantize import RECIPES
from edgeprune.report import render_html, render_markdown
from edgeprune.report.facts import budget_rows
from edgeprune.report.plots.base import CHOSEN, DENSE, FRONT
from edgeprune.search.budget import Budget
from edgeprune.search.choice import pareto_front
from edgeprune.search.result import BuiltArtifact, FitResult, Trial
from edgeprune.tasks.base import Quality
from tests.browser import DevTools, chromium_executable, drawn_fraction, needs_chromium, pixels_near, png_pixels

LAYERS, HEADS = 4, 6
SECTION_IDS = ("summary", "device", "budgets", "pareto", "heads", "latency", "candidates", "trials", "provenance",
               "reproduce")
PLOT_IDS = ("plot-quality-latency", "plot-quality-size", "plot-head-importance", "plot-kept-heads", "plot-latency")
TEACHER_VALIDATION = Quality("accuracy", 0.955, split="validation", examples=200)


def benchmark(p50: float, spread: float, peak_rss_mb: float = 180.0, runs: int = 24) -> BenchmarkResult:
    """A benchmark whose samples spread around `p50`; percentiles picked from the samples."""
    samples = [p50 + spread * math.sin(1.7 * i) for i in range(runs)]
    ordered = sorted(samples)

    def pick(fraction: float) -> float:
        return ordered[round(fraction * (runs - 1))]

    mean = sum(samples) / runs
    deviation = math.sqrt(sum((s - mean) ** 2 for s in samples) / runs)
    return BenchmarkResult(device="host", runtime="executorch", threads=2, warmup_runs=5, timed_runs=runs,
                           latency_ms=samples, p50_ms=pick(0.5), p90_ms=pick(0.9), p99_ms=pick(0.99), mean_ms=mean,
                           cv=deviation / mean, first_run_ms=p50 * 3, load_ms=40.0, rss_before_load_mb=120.0,
                           peak_rss_mb=peak_rss_mb, file_bytes=0)


def artifact(path: str, recipe: str, heads_removed: int, file_mb: float, validation: float | None,
             bench: BenchmarkResult | None) -> BuiltArtifact:
    """An artifact that removes heads 1, 2, ... of layer 0, then of layer 1, and so on."""
    removed = iter(range(heads_removed))
    kept = [[h for h in range(HEADS) if not (h >= 1 and next(removed, None) is not None)] for _ in range(LAYERS)]
    plan = PruningPlan([HEADS] * LAYERS, kept, criterion="taylor-output-proj", strategy="global-topk")
    assert plan.heads_removed == heads_removed
    if bench is not None:
        bench.file_bytes = int(file_mb * 1e6)
    return BuiltArtifact(
        label="candidate", recipe=RECIPES.get(recipe), path=path, plan=StructurePlan(plan),
        parameters=int(file_mb * 250_000),
        file_bytes=int(file_mb * 1e6), predicted_bytes=int(file_mb * 1.02e6),
        verification=Verification(8, 0.9991, 0.02, 0.99), benchmark=bench,
        validation_quality=None if validation is None else Quality("accuracy", validation, split="validation",
                                                                   examples=200))


def fit_result(budget: Budget | None = None, **changes: object) -> FitResult:
    """A fit on a 4-layer, 6-head model: dense fp32 and four candidates, one of them never benchmarked.

    Budget checks and the Pareto front come from the search's own functions, as in a real fit.
    """
    budget = budget or Budget(max_mb=20)
    scores = HeadScores(np.array([[((3 * layer + 5 * head) % 7) / 7 + 0.05 * layer for head in range(HEADS)]
                                  for layer in range(LAYERS)]), "taylor-output-proj", num_examples=64)
    scores.scores[3, 5] = np.nan  # a head removed before scoring
    dense = artifact("dense-fp32.pte", "fp32", 0, 90.0, 0.953, benchmark(30.0, 2.0, 260.0))
    dense.label = "dense baseline"
    candidates = [
        artifact("(not kept) candidate-int8-0.pte", "int8", 0, 24.0, 0.950, benchmark(14.0, 1.0)),
        artifact("model.pte", "int8", 8, 19.0, 0.944, benchmark(11.0, 1.5)),
        artifact("(not kept) candidate-int8-14.pte", "int8", 14, 15.5, 0.902, benchmark(9.0, 0.8)),
        artifact("(not kept) candidate-fp32-14.pte", "fp32", 14, 60.0, None, None),
    ]
    for candidate in [dense, *candidates]:
        candidate.checks = budget.check(candidate.file_bytes, candidate.benchmark, candidate.validation_quality,
                                        TEACHER_VALIDATION)
    fitted = candidates[1]
    fitted.label = "fitted"
    dense.quality = Quality("accuracy", 0.951, examples=400, details={})
    fitted.quality = Quality("accuracy", 0.941, examples=400, details={})
    dense.test_accuracy, fitted.test_accuracy = dense.quality.value, fitted.quality.value
    result = FitResult(
        status="fit", message="fits every budget with int8, 8 of 24 heads removed", device="host",
        budget=budget, task={"name": "minilm-bbc", "kind": "classification", "model_path": "/models/minilm",
                             "metric": "accuracy", "split_sizes": {"calibration": 400, "validation": 200, "test": 400}},
        teacher_test_accuracy=0.953, head_scores=scores, dense=dense, fitted=fitted,
        trials=[Trial("int8", 8, 18_900_000, 19_000_000, True, 12.5),
                Trial("int8", 4, 21_000_000, note="skipped: the size model predicts it is over budget")],
        reproduce={"command": "edgeprune fit --device host --max-mb 20", "runtime": "executorch",
                   "versions": {"edgeprune": "0.1.0", "executorch": "1.5.1"}},
        out_dir="runs/fit-test", elapsed_s=321.0, timings_s={"scoring": 20.0, "search": 250.0},
        candidates=candidates, pareto=pareto_front(candidates, budget),
        teacher_quality=Quality("accuracy", 0.953, examples=400),
    )
    return dataclasses.replace(result, **changes)


# ---- content, without a browser ---------------------------------------------------------------------------------

def svg_of(page: str, element_id: str) -> str:
    return re.search(rf'<svg id="{element_id}".*?</svg>', page, re.S).group(0)


def test_every_section_and_figure_is_in_the_page_and_nothing_is_fetched():
    page = render_html(fit_result())
    for element_id in SECTION_IDS + PLOT_IDS:
        assert f'id="{element_id}"' in page, element_id
    assert page.count("<svg ") == len(PLOT_IDS)
    assert "<script" not in page and "<link" not in page
    assert re.findall(r'(?:src|href)="(?!#)', page) == [] and re.findall(r"url\((?!#)", page) == []


def test_the_pareto_plots_mark_the_front_and_exactly_one_chosen_point():
    result = fit_result()
    assert result.pareto == ["(not kept) candidate-int8-0.pte", "model.pte", "(not kept) candidate-int8-14.pte"]
    page = render_html(result)
    for plot in ("plot-quality-latency", "plot-quality-size"):
        svg = svg_of(page, plot)
        assert svg.count('class="point front chosen"') == 1 and svg.count('class="point front"') == 2
    assert svg_of(page, "plot-quality-latency").count('class="point') == 4  # dense and three benchmarked
    assert "Not plotted (not measured): fp32, 14 heads removed" in page  # no benchmark, no validation quality
    assert svg_of(page, "plot-quality-size").count('class="point') == 4


def test_points_sit_where_their_figures_put_them():
    result = fit_result()
    svg = svg_of(render_html(result), "plot-quality-latency")
    placed = [(float(x), float(y), tip) for tip, x, y in re.findall(  # a point's tooltip, then its marker's x, y
        r'class="point[^"]*">\s*<title>([^<]*)</title>.*?<use [^>]*x="([\d.]+)" y="([\d.]+)"', svg, re.S)]
    by_latency = sorted(placed, key=lambda p: p[0])  # left to right: p50 about 9, 11, 14, 30 ms
    assert [tip.split(":")[0] for _, _, tip in by_latency] == [
        "int8, 14 heads removed", "fitted", "int8, 0 heads removed", "dense baseline (fp32)"]
    by_height = sorted(placed, key=lambda p: p[1])  # top to bottom: quality 95.3, 95.0, 94.4, 90.2 %
    assert [tip.split(":")[0] for _, _, tip in by_height] == [
        "dense baseline (fp32)", "int8, 0 heads removed", "fitted", "int8, 14 heads removed"]
    fast, fitted, slow = (c.benchmark.p50_ms for c in (result.candidates[2], result.fitted, result.candidates[0]))
    (x_fast, _, _), (x_fitted, _, _), (x_slow, _, _), _ = by_latency
    assert (x_fitted - x_fast) / (x_slow - x_fitted) == pytest.approx((fitted - fast) / (slow - fitted), rel=1e-3)


def test_the_kept_heads_map_and_heat_map_have_one_cell_per_head():
    page = render_html(fit_result())
    kept = svg_of(page, "plot-kept-heads")
    assert kept.count('class="kept"') == LAYERS * HEADS - 8 and kept.count('class="removed"') == 8
    heat = svg_of(page, "plot-head-importance")
    assert heat.count('class="cell"') == LAYERS * HEADS
    assert "layer 3, head 5: removed before scoring" in heat


def test_the_latency_distribution_draws_every_sample_of_every_benchmarked_artifact():
    result = fit_result()
    latency = svg_of(render_html(result), "plot-latency")
    benchmarked = [result.dense] + [c for c in result.candidates if c.benchmark is not None]
    rows = re.findall(r'class="samples">(.*?)</g>\s*</g>', latency, re.S)  # one group of markers per artifact
    assert [row.count("<use ") for row in rows] == [len(a.benchmark.latency_ms) for a in benchmarked] == [24] * 4
    assert latency.count('class="box"') == 4


def test_budgets_pass_and_fail_against_measured_values():
    result = fit_result(budget=Budget(max_mb=18))
    result.fitted.checks = result.budget.check(result.fitted.file_bytes, result.fitted.benchmark,
                                               result.fitted.validation_quality, TEACHER_VALIDATION)
    (size,) = budget_rows(result)
    assert (size.value, size.passed, size.source) == ("19.00 MB", False, "measured (the exported file)")
    assert '<span class="fail">fail</span>' in render_html(result)
    assert "| size (`--max-mb`) | 18 MB | 19.00 MB | measured (the exported file) | fail |" in render_markdown(result)


def test_every_budget_is_shown_with_its_flag_value_and_source():
    budget = Budget(max_mb=20, max_memory_mb=150, max_latency_ms=12, latency_percentile=90, max_energy_mj=5,
                    min_quality="-1%")
    result = fit_result(budget=budget)
    rows = {row.flag: row for row in budget_rows(result)}
    assert list(rows) == ["--max-mb", "--max-latency-ms", "--max-memory-mb", "--max-energy-mj", "--min-quality"]
    # 180 MB peak, 120 MB before the program loaded: the artifact adds 60 MB, under the 150 MB budget
    assert rows["--max-memory-mb"].value == "60.00 MB" and rows["--max-memory-mb"].passed
    p90 = result.fitted.benchmark.p90_ms
    assert rows["--max-latency-ms"].value == f"{p90:.2f} ms" and rows["--max-latency-ms"].passed == (p90 <= 12)
    assert rows["--max-latency-ms"].source == "measured on host"
    assert rows["--max-energy-mj"].value == "not measured" and not rows["--max-energy-mj"].passed
    floor = TEACHER_VALIDATION.value * 0.99
    assert rows["--min-quality"].limit == f"-1% of the dense teacher: {100 * floor:.2f} %"
    assert rows["--min-quality"].passed == (0.944 >= floor)
    page = render_html(result)
    # each Pareto plot: its own axis' budget and the quality floor; the samples: the latency budget
    assert [svg_of(page, plot).count('class="budget"') for plot in ("plot-quality-latency", "plot-quality-size",
                                                                     "plot-latency")] == [2, 2, 1]


def test_energy_is_labelled_measured_only_when_a_sensor_read_it():
    result = fit_result(budget=Budget(max_mb=20, max_energy_mj=5))
    bench = result.fitted.benchmark
    bench.energy_mj_per_inference, bench.energy_source = 3.2, "estimated:power-model"
    result.fitted.checks = result.budget.check(result.fitted.file_bytes, bench, None, None)
    energy = next(r for r in budget_rows(result) if r.flag == "--max-energy-mj")
    assert (energy.value, energy.source, energy.passed) == ("3.20 mJ", "estimated (power-model)", True)
    bench.energy_source = "measured:vcgencmd"
    assert next(r for r in budget_rows(result) if r.flag == "--max-energy-mj").source == \
        "measured on host (vcgencmd)"
    assert '<span class="badge measured">measured on host (vcgencmd)</span>' in render_html(result)


def test_device_facts_show_thermals_throttling_and_the_profile_when_recorded():
    result = fit_result()
    bench = result.fitted.benchmark
    bench.thermal_before_c, bench.thermal_after_c = {"thermal:cpu": 48.0}, {"thermal:cpu": 81.5}
    bench.throttled, bench.throttle_reasons = True, ["soft temperature limit active"]
    result.device_profile = {"name": "pi5", "cores": 4, "max_mb": 100.0, "power": {"idle_w": 2.0},
                             "endpoint": {"host": "pi5.local", "key": "~/.ssh/id"}}
    table = re.search(r'<table id="device-table".*?</table>', render_html(result), re.S).group(0)
    assert "<td>temperature after the timed runs</td><td>thermal:cpu 81.5 °C</td>" in table
    assert "yes: latency and energy may be pessimistic</span> soft temperature limit active" in table
    assert '<td>cores</td><td class="num">4</td>' in table and "<td>profile default max mb</td>" in table
    assert "<td>power idle w</td>" in table and "pi5.local" not in table  # how to reach it is no device fact


def test_text_from_results_is_escaped():
    hostile = "<img src=x onerror=alert(1)>"
    result = fit_result(message=hostile, task={"name": hostile, "model_path": hostile}, suggestions=[hostile])
    result.fitted.label = hostile
    page = render_html(result)
    assert hostile not in page and html.escape(hostile) in page


def test_a_result_without_benchmarks_candidates_or_scores_still_renders():
    unscored = HeadScores(np.full((LAYERS, HEADS), np.nan), "fluctuation", 0)
    result = fit_result(candidates=[], pareto=[], head_scores=unscored, trials=[], teacher_quality=None)
    result.dense.benchmark = None
    result.fitted.benchmark = None
    result.fitted.quality = None
    page = render_html(result)
    assert "No artifact was benchmarked" in page and "No head importance scores recorded" in page
    assert 'id="plot-quality-size"' in page and 'id="plot-latency"' not in page
    assert "none: no latency, memory or energy figure on this page was measured" in page
    assert "not measured" in render_markdown(result)


def test_estimated_benchmarks_are_labelled_estimated():
    result = fit_result()
    result.fitted.benchmark.measured = False
    page = render_html(result)
    summary = re.search(r'<table id="summary-table".*?</table>', page, re.S).group(0)
    assert '<span class="badge estimated">estimated</span>' in summary
    assert "fitted: int8, 8 heads removed (estimated)" in svg_of(page, "plot-latency")


def test_a_fit_that_failed_says_what_binds_and_what_would_help():
    result = fit_result(status="budget_not_met", binding_budgets=["latency p50"],
                        suggestions=["raise --max-latency-ms to 9.0 (the fastest candidate measured)"])
    page = render_html(result)
    status = re.search(r'<div class="status budget_not_met" id="status">.*?</div>', page, re.S).group(0)
    assert "Binding: latency p50." in status and "raise --max-latency-ms to 9.0" in status


# ---- a real headless browser ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    devtools = DevTools(chromium_executable(), tmp_path_factory.mktemp("chromium-profile"))
    yield devtools
    devtools.close()


SVG_BOXES = """JSON.stringify([...document.querySelectorAll('svg.plot')].map(svg => {
  const r = svg.getBoundingClientRect(), b = svg.getBBox();
  return {id: svg.id, x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height,
          contentWidth: b.width, contentHeight: b.height, shapes: svg.querySelectorAll('path,use').length};
}))"""


@needs_chromium
def test_the_report_renders_in_chromium_without_console_errors_and_draws_every_figure(browser, tmp_path):
    report = tmp_path / "report.html"
    report.write_text(render_html(fit_result()))
    page = browser.open(report)
    assert page.errors() == []
    ids = page.evaluate("[...document.querySelectorAll('[id]')].map(e => e.id)")
    assert set(SECTION_IDS + PLOT_IDS) <= set(ids)
    headings = page.evaluate("[...document.querySelectorAll('h2')].map(h => h.textContent)")
    assert headings[:3] == ["Summary", "Device and runtime", "Budgets"] and len(headings) == len(SECTION_IDS)
    boxes = json.loads(page.evaluate(SVG_BOXES))
    assert [b["id"] for b in boxes] == ["plot-quality-latency", "plot-quality-size", "plot-head-importance",
                                        "plot-kept-heads", "plot-latency"]
    # the marks each figure must show on screen, by colour: front, chosen and dense points; kept heads; samples
    inks = {"plot-quality-latency": (FRONT, CHOSEN, DENSE), "plot-quality-size": (FRONT, CHOSEN, DENSE),
            "plot-head-importance": ("#440154", "#fde725"), "plot-kept-heads": (CHOSEN,),  # viridis' ends
            "plot-latency": (FRONT, CHOSEN, DENSE)}
    for box in boxes:
        assert box["width"] > 200 and box["height"] > 150 and box["contentWidth"] > 100 and box["shapes"] > 10, box
        pixels = png_pixels(page.screenshot(box))
        assert drawn_fraction(pixels) > 0.03, f"{box['id']} looks blank on screen"
        for ink in inks[box["id"]]:
            assert pixels_near(pixels, ink) >= 20, f"{box['id']}: nothing painted in {ink}"


@needs_chromium
def test_the_browser_checks_catch_a_script_error_an_external_load_and_a_blank_figure(browser, tmp_path):
    page_text = render_html(fit_result())
    policy = re.search(r'<meta http-equiv="Content-Security-Policy"[^>]*>', page_text).group(0)
    scripted = tmp_path / "scripted.html"  # without the policy, so that the script runs and throws
    scripted.write_text(page_text.replace(policy, "").replace(
        "</body>", "<script>undefinedFunctionOfTheReport()</script></body>"))
    assert any("undefinedFunctionOfTheReport" in e for e in browser.open(scripted).errors())

    fetching = tmp_path / "fetching.html"  # the policy refuses anything the page would fetch
    fetching.write_text(page_text.replace("</body>", '<img src="https://example.com/logo.png" alt=""></body>'))
    assert any("Content Security Policy" in e for e in browser.open(fetching).errors())

    blank = tmp_path / "blank.html"
    blank.write_text(page_text.replace('<svg id="plot-latency"', '<svg id="plot-latency" style="visibility:hidden"'))
    page = browser.open(blank)
    box = next(b for b in json.loads(page.evaluate(SVG_BOXES)) if b["id"] == "plot-latency")
    pixels = png_pixels(page.screenshot(box))
    assert box["width"] > 200 and drawn_fraction(pixels) < 0.01 and pixels_near(pixels, CHOSEN) == 0
