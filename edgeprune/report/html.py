"""report.html: one self-contained page a team can act on.

Inline CSS and SVG only: no script, font, image or style sheet is fetched, and the page's content
security policy forbids it, so the file reads the same offline, attached to a ticket, years later.
Every figure says whether it was measured (and on which device) or estimated.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeprune.report.facts import (
    ESTIMATED,
    MEASURED,
    NOT_MEASURED,
    PERCENT_METRICS,
    benchmark_source,
    budget_rows,
    energy_source,
    format_mb,
    format_metric,
    format_quality,
    latency_at,
    metric_name,
    quantile,
    search_quality,
    teacher_quality,
    test_quality,
    verdict,
)
from edgeprune.report.svg import Axes, colour, esc, ink_for, legend, line, num, open_svg, span, text, ticks
from edgeprune.search.result import BuiltArtifact, FitResult

SECTIONS = (
    ("summary", "Summary"), ("device", "Device and runtime"), ("budgets", "Budgets"),
    ("pareto", "Quality against latency and size"), ("heads", "Attention heads"),
    ("latency", "Latency of the finalists"), ("candidates", "Candidates"), ("trials", "Search trials"),
    ("provenance", "Measured and estimated figures"), ("reproduce", "Reproduce"),
)
FRONT, CHOSEN, OTHER, DENSE, BUDGET, FEASIBLE = "#d9480f", "#1864ab", "#adb5bd", "#343a40", "#c92a2a", "#ebfbee"
CSS = """
body{font:15px/1.5 system-ui,sans-serif;color:#212529;max-width:1180px;margin:0 auto;padding:0 20px 60px}
h1{font-size:1.6em;margin:.8em 0 .2em}h2{border-bottom:1px solid #dee2e6;padding-bottom:.2em;margin-top:1.6em}
nav a{margin-right:.9em}table{border-collapse:collapse;margin:.6em 0}
th,td{border:1px solid #dee2e6;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#f1f3f5}
td.num{text-align:right;font-variant-numeric:tabular-nums}.status{padding:.6em 1em;border-radius:6px}
.status.fit{background:#ebfbee;border:1px solid #2b8a3e}
.status.budget_not_met{background:#fff5f5;border:1px solid #c92a2a}
.pass{color:#2b8a3e;font-weight:600}.fail{color:#c92a2a;font-weight:600}.unknown{color:#868e96;font-weight:600}
.badge{display:inline-block;border-radius:4px;padding:0 .4em;font-size:.85em;white-space:nowrap}
.badge.measured{background:#e7f5ff;color:#1864ab}.badge.estimated{background:#fff4e6;color:#d9480f}
.badge.missing{background:#f1f3f5;color:#868e96}.figures{display:flex;flex-wrap:wrap;gap:18px}
figure{margin:0}figcaption{font-size:.9em;color:#495057;max-width:580px}.warning{color:#c92a2a;font-weight:600}
pre{background:#f8f9fa;border:1px solid #dee2e6;padding:.8em;overflow:auto}.empty{color:#868e96;font-style:italic}
"""
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"




class Markup(str):
    """Already-escaped HTML that a table cell inserts as is."""


def render_html(result: FitResult) -> str:
    """The fit as one HTML page with inline SVG figures; renders whatever fields the result has."""
    title = f"edgeprune fit: {result.task.get('name', 'task')} on {result.device}"
    bodies = {
        "summary": _summary(result), "device": _device(result), "budgets": _budgets(result),
        "pareto": _pareto(result), "heads": _heads(result), "latency": _latency(result),
        "candidates": _candidates_table(result), "trials": _trials(result), "provenance": _provenance(result),
        "reproduce": _reproduce(result),
    }
    nav = "".join(f'<a href="#{key}">{esc(name)}</a>' for key, name in SECTIONS)
    sections = "".join(f'<section id="{key}"><h2>{esc(name)}</h2>{bodies[key]}</section>' for key, name in SECTIONS)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(POLICY)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1 id="title">{esc(title)}</h1>{_status(result)}<nav>{nav}</nav></header>{sections}'
        "</body></html>\n"
    )


def _status(result: FitResult) -> str:
    parts = [f'<div class="status {esc(result.status)}" id="status"><p><strong>{esc(result.status)}</strong> — '
             f"{esc(result.message)}</p>"]
    if result.binding_budgets:
        parts.append(f"<p>Binding: {esc(', '.join(result.binding_budgets))}.</p>")
    if result.suggestions:
        parts.append("<p>What would make it fit:</p><ul>"
                     + "".join(f"<li>{esc(s)}</li>" for s in result.suggestions) + "</ul>")
    return "".join(parts) + "</div>"


def _badge(source: str) -> Markup:
    kind = "measured" if source.startswith(MEASURED) else "estimated" if source.startswith(ESTIMATED) else "missing"
    return Markup(f'<span class="badge {kind}">{esc(source)}</span>')


def _cell(value: object) -> str:
    if isinstance(value, Markup):
        return f"<td>{value}</td>"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<td class="num">{esc(value)}</td>'
    return f"<td>{esc(value)}</td>"


def _table(headers: list[str], rows: list[list[object]], element_id: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    ident = f' id="{esc(element_id)}"' if element_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _empty(message: str) -> str:
    return f'<p class="empty">{esc(message)}</p>'


def _figure(element_id: str, content: str, caption: str = "") -> str:
    caption_html = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure id="{esc(element_id)}-figure">{content}{caption_html}</figure>'


def _or_missing(value: float | None, fmt: str) -> str:
    return NOT_MEASURED if value is None else fmt.format(value)


def _heads_removed(artifact: BuiltArtifact) -> int | None:
    plan = artifact.plan or {}
    if "heads_removed" in plan:
        return int(plan["heads_removed"])
    if "num_heads" in plan and "kept_heads" in plan:
        return sum(plan["num_heads"]) - sum(map(len, plan["kept_heads"]))
    return None


def _is_chosen(artifact: BuiltArtifact, result: FitResult) -> bool:
    # identity within one fit; equal paths once the result has been through result.json
    return artifact is result.fitted or artifact.path == result.fitted.path


def _on_front(artifact: BuiltArtifact, result: FitResult) -> bool:
    return artifact is not result.dense and artifact.path in result.pareto


def _name(artifact: BuiltArtifact, result: FitResult) -> str:
    if artifact is result.dense:
        return f"dense baseline ({artifact.recipe})"
    name = f"{artifact.recipe}, {artifact.describe()}" if "heads_removed" in (artifact.plan or {}) else (
        f"{artifact.recipe}, {_heads_removed(artifact)} heads removed")
    return f"{result.fitted.label}: {name}" if _is_chosen(artifact, result) else name


def _candidates(result: FitResult) -> list[BuiltArtifact]:
    """Every exported candidate, the chosen one included even when the result lists no candidates."""
    candidates = list(result.candidates)
    if not any(_is_chosen(c, result) for c in candidates):
        candidates.append(result.fitted)
    return candidates


def _percentile(result: FitResult) -> int:
    return result.budget.latency_percentile


def _summary(result: FitResult) -> str:
    dense, fitted = result.dense, result.fitted
    percentile = _percentile(result)

    def bench_figure(artifact: BuiltArtifact, field: str, fmt: str) -> str:
        return _or_missing(None if artifact.benchmark is None else getattr(artifact.benchmark, field), fmt)

    def latency(artifact: BuiltArtifact) -> str:
        return _or_missing(None if artifact.benchmark is None else latency_at(artifact.benchmark, percentile),
                           "{:.2f} ms")

    bench_source = _badge(benchmark_source(fitted.benchmark))
    test = test_quality(fitted) or test_quality(dense)
    rows: list[list[object]] = [
        ["recipe", dense.recipe, fitted.recipe, ""],
        ["heads removed", _heads_removed(dense), _heads_removed(fitted), ""],
        ["parameters", f"{dense.parameters:,}", f"{fitted.parameters:,}", ""],
        ["file size", format_mb(dense.file_bytes), format_mb(fitted.file_bytes), _badge(f"{MEASURED} (the file)")],
        ["file size (size model)", format_mb(dense.predicted_bytes), format_mb(fitted.predicted_bytes),
         _badge(f"{ESTIMATED} (size model)")],
        [f"latency p{percentile}", latency(dense), latency(fitted), bench_source],
        ["load time", bench_figure(dense, "load_ms", "{:.1f} ms"), bench_figure(fitted, "load_ms", "{:.1f} ms"),
         bench_source],
        ["peak RSS of the benchmark process", bench_figure(dense, "peak_rss_mb", "{:.0f} MB"),
         bench_figure(fitted, "peak_rss_mb", "{:.0f} MB"), bench_source],
        ["energy per inference", bench_figure(dense, "energy_mj_per_inference", "{:.2f} mJ"),
         bench_figure(fitted, "energy_mj_per_inference", "{:.2f} mJ"), _badge(energy_source(fitted.benchmark))],
        [f"{metric_name(result)} (validation)", format_quality(search_quality(dense)),
         format_quality(search_quality(fitted)), _badge(f"{MEASURED} through the runtime")],
        [f"{metric_name(result)} (test)", format_quality(test_quality(dense)), format_quality(test_quality(fitted)),
         _badge(f"{MEASURED} through the runtime" + (f" on {test.examples} examples" if test else ""))
         if test else _badge(NOT_MEASURED)],
        ["worst cosine to the PyTorch source", f"{dense.verification.min_cosine:.6f}",
         f"{fitted.verification.min_cosine:.6f}", _badge(f"{MEASURED} on {fitted.verification.num_inputs} inputs")],
    ]
    table = _table(["", f"dense baseline ({dense.recipe})", f"{fitted.label} ({fitted.recipe})", "source"], rows,
                   "summary-table")
    teacher = teacher_quality(result)
    parts = [table, f"<p>Dense teacher in PyTorch: {esc(metric_name(result))} (test) "
                    f"{esc(format_quality(teacher))}. The fit took {result.elapsed_s:.0f} s{_timings(result)}. "
                    f"Files in <code>{esc(result.out_dir)}</code>.</p>"]
    if result.per_class_regressions:
        parts.append("<p>Classes whose test recall dropped against the dense baseline:</p>" + _table(
            ["class", "dense recall", "fitted recall", "drop", "extra errors"],
            [[r.get("label"), f"{r.get('reference_recall', 0):.3f}", f"{r.get('recall', 0):.3f}",
              f"{r.get('drop', 0):.3f}", r.get("extra_errors", "")] for r in result.per_class_regressions],
            "regressions-table"))
    return "".join(parts)


def _timings(result: FitResult) -> str:
    if not result.timings_s:
        return ""
    return " (" + ", ".join(f"{esc(stage)} {seconds:.0f} s" for stage, seconds in result.timings_s.items()) + ")"


def _device(result: FitResult) -> str:
    rows: list[list[object]] = [["device", result.device]]
    profile: dict[str, Any] = getattr(result, "device_profile", None) or {}  # the profile as JSON, when recorded
    for key, value in profile.items():
        if key in ("name", "source", "endpoint", "python") or value is None:
            continue  # how to reach the device is not a fact about it
        if isinstance(value, dict):
            rows += [[f"{key} {inner}".replace("_", " "), v] for inner, v in value.items() if v is not None]
        elif isinstance(value, list):
            rows.append([key.replace("_", " "), ", ".join(str(v.get("name", v)) if isinstance(v, dict) else str(v)
                                                         for v in value)])
        else:
            rows.append([("profile default " if key.startswith("max_") else "") + key.replace("_", " "), value])
    rows.append(["runtime", result.reproduce.get("runtime", "unknown")])
    bench = result.fitted.benchmark or result.dense.benchmark
    if bench is None:
        rows.append(["benchmark", "none: no latency, memory or energy figure on this page was measured"])
    else:
        rows += [["benchmarked on", bench.device], ["runtime (benchmark)", f"{bench.runtime} via {bench.runner}"],
                 ["threads", bench.threads], ["warm-up runs", bench.warmup_runs], ["timed runs", bench.timed_runs]]
        for when, temperatures in (("before", bench.thermal_before_c), ("after", bench.thermal_after_c)):
            if temperatures:
                rows.append([f"temperature {when} the timed runs",
                             ", ".join(f"{zone} {celsius:.1f} °C" for zone, celsius in temperatures.items())])
        rows.append(["throttled during the run",
                     Markup('<span class="warning">yes: latency and energy may be pessimistic</span> '
                            + esc("; ".join(bench.throttle_reasons))) if bench.throttled else "no"])
        rows.append(["energy", f"{energy_source(bench)}" + (f": {bench.energy_detail}" if bench.energy_detail
                                                             else "")])
        if bench.idle_power_w is not None or bench.active_power_w is not None:
            rows.append(["power idle / active", f"{_or_missing(bench.idle_power_w, '{:.2f} W')} / "
                                                f"{_or_missing(bench.active_power_w, '{:.2f} W')}"])
        for note in bench.notes:
            rows.append(["note", note])
    for package, version in (result.reproduce.get("versions") or {}).items():
        rows.append([f"{package} version", version])
    task = result.task
    rows += [["task", f"{task.get('name', 'unknown')} ({task.get('kind', 'unknown kind')})"],
             ["model", task.get("model_path", "unknown")]]
    if task.get("split_sizes"):
        rows.append(["split sizes", ", ".join(f"{k} {v}" for k, v in task["split_sizes"].items())])
    return _table(["fact", "value"], rows, "device-table")


def _budgets(result: FitResult) -> str:
    rows = budget_rows(result)
    if not rows:
        return _empty("No budget was set.")
    cells = [[f"{r.name} ({r.flag})", r.limit, r.value, _badge(r.source),
              Markup(f'<span class="{verdict(r)}">{verdict(r)}</span>')] for r in rows]
    return _table(["budget", "limit", f"{result.fitted.label} ({result.fitted.recipe})", "source", "verdict"],
                  cells, "budget-table") + "<p>A budget whose value was not measured fails.</p>"


@dataclass
class _Point:
    artifact: BuiltArtifact
    name: str
    x: float
    y: float
    on_front: bool
    chosen: bool
    dense: bool
    estimated: bool


def _marker(point: _Point) -> str:
    if point.dense:
        return f'<rect x="-5" y="-5" width="10" height="10" fill="{DENSE}"/>'
    fill = FRONT if point.on_front else OTHER
    if point.estimated:
        return f'<circle r="5.5" fill="#fff" stroke="{fill}" stroke-width="2" stroke-dasharray="2 2"/>'
    return f'<circle r="{6.5 if point.on_front else 5}" fill="{fill}" stroke="#fff" stroke-width="1"/>'


def _quality_floor(result: FitResult) -> float | None:
    check = next((c for c in result.fitted.checks if c.kind == "quality"), None)
    return None if check is None else check.limit


def _pareto(result: FitResult) -> str:
    metric = metric_name(result)
    percentile = _percentile(result)
    floor = _quality_floor(result)
    figures = [
        _scatter(result, "plot-quality-latency", f"latency p{percentile} (ms)",
                 lambda a: None if a.benchmark is None else latency_at(a.benchmark, percentile),
                 lambda a: a.benchmark is not None and not a.benchmark.measured, result.budget.max_latency_ms, floor,
                 metric, f"Validation {metric} against latency p{percentile}"),
        _scatter(result, "plot-quality-size", "file size (MB)", lambda a: a.file_bytes / 1e6, lambda a: False,
                 result.budget.max_mb, floor, metric, f"Validation {metric} against file size"),
    ]
    front = [_name(c, result) for c in _candidates(result) if _on_front(c, result)]
    return (f'<div class="figures">{"".join(figures)}</div><p>Pareto front over validation {esc(metric)}, size and '
            f"latency: {esc('; '.join(front) or 'none recorded')}. The shaded area meets the budgets drawn; hollow "
            "dashed markers are estimates; hover a point for its figures.</p>")


def _scatter(result: FitResult, element_id: str, x_title: str, x_of: Callable[[BuiltArtifact], float | None],
             estimated_of: Callable[[BuiltArtifact], bool], x_limit: float | None, y_floor: float | None, metric: str,
             title: str) -> str:
    points, left_out = [], []
    for artifact in [result.dense, *_candidates(result)]:
        x, quality = x_of(artifact), search_quality(artifact)
        if x is None or quality is None:
            left_out.append(_name(artifact, result))
            continue
        points.append(_Point(artifact, _name(artifact, result), x, quality.value, _on_front(artifact, result),
                             _is_chosen(artifact, result), artifact is result.dense, estimated_of(artifact)))
    caption = f"{title}. " + (f"Not plotted (not measured): {'; '.join(left_out)}." if left_out else "")
    if not points:
        return _figure(element_id, _empty(f"Nothing to plot. {caption}"))
    x_values = [p.x for p in points] + ([x_limit] if x_limit is not None else [])
    x_low, x_high = span(x_values)
    axes = Axes((max(0.0, x_low), x_high), span([p.y for p in points] + ([y_floor] if y_floor is not None else [])))
    parts = [open_svg(element_id, axes.width, axes.height, title),
             axes.frame(x_title, f"{metric} (validation)", lambda v: f"{v:g}", _tick_format(axes, metric))]
    limit_x = axes.px(x_limit) if x_limit is not None else axes.right
    floor_y = axes.py(y_floor) if y_floor is not None else axes.bottom
    higher_is_better = next((q.higher_is_better for q in map(search_quality, [result.dense, *_candidates(result)])
                             if q is not None), True)
    # the quality budget is a floor, or a ceiling when lower is better (perplexity)
    feasible_top, feasible_bottom = (axes.top, floor_y) if higher_is_better or y_floor is None else \
        (floor_y, axes.bottom)
    budget_style = f'class="budget" stroke="{BUDGET}" stroke-dasharray="6 4" stroke-width="1.5"'
    if x_limit is not None or y_floor is not None:
        parts.append(f'<rect class="feasible" x="{num(axes.left)}" y="{num(feasible_top)}" '
                     f'width="{num(max(0.0, limit_x - axes.left))}" '
                     f'height="{num(max(0.0, feasible_bottom - feasible_top))}" '
                     f'fill="{FEASIBLE}"/>')
    if x_limit is not None:
        parts.append(line(limit_x, axes.top, limit_x, axes.bottom, budget_style))
        right_half = limit_x > (axes.left + axes.right) / 2  # keep the label inside the plot
        parts.append(text(limit_x + (-4 if right_half else 4), axes.top + 14, f"budget {x_limit:g}",
                          "end" if right_half else "start", f'fill="{BUDGET}"'))
    if y_floor is not None:
        parts.append(line(axes.left, floor_y, axes.right, floor_y, budget_style))
        parts.append(text(axes.right - 4, floor_y - 4, f"{'floor' if higher_is_better else 'ceiling'} "
                          f"{format_metric(y_floor, metric)}", "end",
                          f'fill="{BUDGET}"'))
    for point in sorted(points, key=lambda p: (p.chosen, p.on_front)):  # the chosen point last, on top
        tip = (f"{point.name}: {x_title} {point.x:.3g} ({ESTIMATED if point.estimated else MEASURED}), "
               f"{metric} {format_metric(point.y, metric)}" + (", on the Pareto front" if point.on_front else ""))
        ring = (f'<circle class="chosen-ring" r="11" fill="none" stroke="{CHOSEN}" stroke-width="2.5"/>'
                f'<text x="14" y="-10" fill="{CHOSEN}" font-weight="600">{esc(result.fitted.label)}</text>'
                if point.chosen else "")
        dense_label = f'<text x="9" y="14" fill="{DENSE}">dense</text>' if point.dense else ""
        classes = "point" + (" front" if point.on_front else "") + (" chosen" if point.chosen else "")
        parts.append(f'<g class="{classes}" transform="translate({num(axes.px(point.x))},{num(axes.py(point.y))})">'
                     f"<title>{esc(tip)}</title>{_marker(point)}{ring}{dense_label}</g>")
    parts.append(legend([
        (f'<circle r="6.5" fill="{FRONT}"/>', "Pareto front"), (f'<circle r="5" fill="{OTHER}"/>', "candidate"),
        (f'<circle r="6" fill="none" stroke="{CHOSEN}" stroke-width="2.5"/>', result.fitted.label),
        (f'<rect x="-5" y="-5" width="10" height="10" fill="{DENSE}"/>', "dense baseline"),
    ], axes.left, 18))
    parts.append("</svg>")
    return _figure(element_id, "".join(parts), caption)


def _tick_format(axes: Axes, metric: str) -> Callable[[float], str]:
    """Quality ticks with as few decimals as show them exactly: 94 %, 94.5 %, 94.25 %."""
    if metric not in PERCENT_METRICS:
        return lambda v: f"{v:.4g}"
    percents = [100 * v for v in ticks(axes.y_low, axes.y_high)]
    decimals = next((d for d in range(4) if all(abs(round(p, d) - p) < 1e-6 for p in percents)), 4)
    return lambda v: f"{100 * v:.{decimals}f} %"


def _heads(result: FitResult) -> str:
    kept = _kept_map(result.fitted.plan, result.fitted.layers_removed)
    return f'<div class="figures">{_heat_map(result.head_scores)}{kept}</div>'


def _grid(rows: int, columns: int) -> tuple[float, float, float, float]:
    """Cell width and height, left and top margin of a layers × heads grid that stays readable."""
    cell_w = min(44.0, max(12.0, 520 / columns))
    return cell_w, min(30.0, max(10.0, cell_w * 0.75)), 64.0, 30.0


def _heat_map(head_scores: dict[str, Any] | None) -> str:
    head_scores = head_scores or {}
    rows = head_scores.get("scores") or []
    finite = [v for row in rows for v in row if v is not None]
    if not finite:
        return _figure("plot-head-importance", _empty("No head importance scores recorded."))
    criterion = head_scores.get("criterion") or "unknown criterion"
    heads = max(len(row) for row in rows)
    cell_w, cell_h, left, top = _grid(len(rows), heads)
    width, height = left + heads * cell_w + 90, top + len(rows) * cell_h + 20
    low, high = min(finite), max(finite)
    title = f"Head importance ({criterion}), layers × heads"
    parts = [open_svg("plot-head-importance", width, height, title),
             text(left, 12, "head →", extra='font-weight="600" font-size="11"')]
    for head in range(heads):
        parts.append(text(left + (head + 0.5) * cell_w, top - 4, head, "middle", 'font-size="10"'))
    for layer, row in enumerate(rows):
        y = top + layer * cell_h
        parts.append(text(left - 6, y + cell_h / 2 + 4, f"layer {layer}", "end"))
        for head, value in enumerate(row):
            x = left + head * cell_w
            fraction = 0.0 if value is None else 0.5 if high == low else (value - low) / (high - low)
            fill, label = ("#dee2e6", "removed before scoring") if value is None else (colour(fraction), f"{value:.4g}")
            parts.append(f'<rect class="cell" x="{num(x)}" y="{num(y)}" width="{num(cell_w)}" height="{num(cell_h)}" '
                         f'fill="{fill}" stroke="#fff"><title>layer {layer}, head {head}: {esc(label)}</title></rect>')
            if value is not None and cell_w >= 36:
                parts.append(text(x + cell_w / 2, y + cell_h / 2 + 4, f"{value:.2g}", "middle",
                                  f'font-size="9" fill="{ink_for(fraction)}"'))
    bar_x, bar_h = left + heads * cell_w + 16, len(rows) * cell_h
    stops = "".join(f'<stop offset="{i / 10:.1f}" stop-color="{colour(1 - i / 10)}"/>' for i in range(11))
    parts.append(f'<defs><linearGradient id="importance-scale" x1="0" y1="0" x2="0" y2="1">{stops}'
                 f'</linearGradient></defs><rect x="{num(bar_x)}" y="{num(top)}" width="14" height="{num(bar_h)}" '
                 f'fill="url(#importance-scale)"/>')
    parts.append(text(bar_x + 18, top + 10, f"{high:.3g}", extra='font-size="10"'))
    parts.append(text(bar_x + 18, top + bar_h, f"{low:.3g}", extra='font-size="10"'))
    parts.append("</svg>")
    normalized = ", normalized per layer" if head_scores.get("normalized_per_layer") else ""
    caption = (f"{title}{normalized}: {MEASURED} on {head_scores.get('num_examples', '?')} calibration examples. "
               "Brighter is more important; grey heads were removed before scoring.")
    return _figure("plot-head-importance", "".join(parts), caption)


def _kept_map(plan: dict[str, Any] | None, layers_removed: list[int] | None = None) -> str:
    plan = plan or {}
    gone = set(layers_removed or ())
    if not plan.get("num_heads") or "kept_heads" not in plan:
        return _figure("plot-kept-heads", _empty("The fitted artifact records no head plan."))
    num_heads = plan["num_heads"]
    kept_heads = [[] if layer in gone else kept for layer, kept in enumerate(plan["kept_heads"])]
    heads = max(num_heads)
    cell_w, cell_h, left, top = _grid(len(num_heads), heads)
    width, height = left + heads * cell_w + 80, top + len(num_heads) * cell_h + 20
    title = "Heads the fitted artifact keeps, per layer"
    parts = [open_svg("plot-kept-heads", width, height, title),
             legend([(f'<rect x="-5" y="-5" width="10" height="10" fill="{CHOSEN}"/>', "kept"),
                     ('<rect x="-5" y="-5" width="10" height="10" fill="#fff" stroke="#adb5bd"/>', "removed")],
                    left, 12)]
    for layer, (total, kept) in enumerate(zip(num_heads, kept_heads, strict=True)):
        y = top + layer * cell_h
        parts.append(text(left - 6, y + cell_h / 2 + 4, f"layer {layer}" + (" (removed)" if layer in gone else ""),
                          "end"))
        for head in range(total):
            is_kept = head in kept
            style = f'fill="{CHOSEN}" stroke="#fff"' if is_kept else 'fill="#fff" stroke="#adb5bd"'
            parts.append(f'<rect class="{"kept" if is_kept else "removed"}" x="{num(left + head * cell_w + 1)}" '
                         f'y="{num(y + 1)}" width="{num(cell_w - 2)}" height="{num(cell_h - 2)}" {style}>'
                         f'<title>layer {layer}, head {head}: {"kept" if is_kept else "removed"}</title></rect>')
        parts.append(text(left + heads * cell_w + 8, y + cell_h / 2 + 4, f"{len(kept)}/{total}"))
    parts.append("</svg>")
    caption = (f"{title}: {sum(map(len, kept_heads))} of {sum(num_heads)} heads kept "
               f"({plan.get('strategy') or 'unknown strategy'} over {plan.get('criterion') or 'unknown criterion'}).")
    return _figure("plot-kept-heads", "".join(parts), caption)


def _finalists(result: FitResult) -> list[BuiltArtifact]:
    """The dense baseline and every benchmarked candidate, in the order they were built."""
    return [a for a in [result.dense, *_candidates(result)] if a.benchmark is not None]


def _latency(result: FitResult) -> str:
    finalists = _finalists(result)
    if not finalists:
        return _empty("No artifact was benchmarked, so there are no latency samples.")
    percentile, limit = _percentile(result), result.budget.max_latency_ms
    values = [v for a in finalists for v in (a.benchmark.latency_ms or [latency_at(a.benchmark, percentile)])
              if v is not None] + ([limit] if limit is not None else [])
    if not values:
        return _empty("The benchmarks recorded no latency figure.")
    low, high = span(values, 0.05)
    names = [_name(a, result) + ("" if a.benchmark.measured else " (estimated)") for a in finalists]
    row_h, left = 40.0, max(160.0, 7.4 * max(map(len, names)) + 16)  # room for the longest name in bold
    height = 40 + row_h * len(finalists) + 50
    axes = Axes((max(0.0, low), high), (0.0, 1.0), width=left + 640, height=height, left=left, right=120, top=40)
    title = "Latency per inference: every timed run, its quartile box and median, whiskers to the extremes"
    parts = [open_svg("plot-latency", axes.width, height, title),
             axes.frame("latency per inference (ms)", None, lambda v: f"{v:g}")]
    if limit is not None:
        x = axes.px(limit)
        parts.append(line(x, axes.top, x, axes.bottom,
                          f'class="budget" stroke="{BUDGET}" stroke-dasharray="6 4" stroke-width="1.5"'))
        parts.append(text(x, axes.top - 6, f"budget p{percentile} {limit:g} ms", "middle", f'fill="{BUDGET}"'))
    for row, (artifact, name) in enumerate(zip(finalists, names, strict=True)):
        bench, chosen = artifact.benchmark, _is_chosen(artifact, result)
        middle = axes.top + (row + 0.5) * row_h
        ink = CHOSEN if chosen else DENSE if artifact is result.dense else FRONT if _on_front(artifact, result) \
            else "#868e96"
        samples = bench.latency_ms or []
        value = latency_at(bench, percentile)
        summary = f"p{percentile} {_or_missing(value, '{:.2f} ms')}" + (f", n={len(samples)}" if samples else "")
        parts.append(f'<g class="finalist"><title>{esc(name)}: {esc(summary)}</title>')
        parts.append(text(left - 8, middle + 4, name, "end", 'font-weight="600"' if chosen else ""))
        if samples:
            q1, median, q3 = (quantile(samples, f) for f in (0.25, 0.5, 0.75))
            parts.append(line(axes.px(min(samples)), middle, axes.px(max(samples)), middle, f'stroke="{ink}"'))
            parts.append(f'<rect class="box" x="{num(axes.px(q1))}" y="{num(middle - 8)}" '
                         f'width="{num(max(1.0, axes.px(q3) - axes.px(q1)))}" height="16" fill="{ink}" '
                         f'fill-opacity="0.25" stroke="{ink}"/>')
            parts.append(line(axes.px(median), middle - 8, axes.px(median), middle + 8,
                              f'stroke="{ink}" stroke-width="2.5"'))
            for index, sample in enumerate(samples):
                jitter = ((index * 0.618034) % 1 - 0.5) * 12  # golden-ratio spread: deterministic and even
                parts.append(f'<circle class="sample" cx="{num(axes.px(sample))}" cy="{num(middle + jitter)}" '
                             f'r="1.8" fill="{ink}" fill-opacity="0.6"/>')
        elif value is not None:  # a native tool that printed only aggregates: its percentile as a diamond
            x = axes.px(value)
            parts.append(f'<path class="aggregate" d="M{num(x)} {num(middle - 6)}l6 6-6 6-6-6z" fill="{ink}"/>')
        parts.append(text(axes.right + 8, middle + 4, summary, extra='font-size="11"'))
        parts.append("</g>")
    parts.append("</svg>")
    first = finalists[0].benchmark
    caption = (f"{title}. Each artifact ran in its own process on {first.device} ({first.runtime}, {first.threads} "
               "threads); estimated rows are labelled.")
    return _figure("plot-latency", "".join(parts), caption)


def _candidates_table(result: FitResult) -> str:
    percentile = _percentile(result)
    rows = []
    for artifact in _candidates(result):
        bench = artifact.benchmark
        failed = [c.name for c in artifact.checks if not c.passed]
        rows.append([
            _name(artifact, result), format_mb(artifact.file_bytes), format_mb(artifact.predicted_bytes),
            _or_missing(None if bench is None else latency_at(bench, percentile), "{:.2f} ms"),
            _or_missing(None if bench is None else bench.peak_rss_mb, "{:.0f} MB"),
            _badge(benchmark_source(bench)), format_quality(search_quality(artifact)),
            "—" if not artifact.checks else "all met" if not failed else "fails " + ", ".join(failed),
            "yes" if _on_front(artifact, result) else "no",
        ])
    return _table(["candidate", "file size", "size model", f"latency p{percentile}", "peak RSS", "benchmark",
                   f"{metric_name(result)} (validation)", "budgets", "Pareto front"], rows, "candidates-table")


def _trials(result: FitResult) -> str:
    if not result.trials:
        return _empty("No trial was recorded.")
    rows = [[t.recipe, t.describe(), "—" if t.estimated_quality is None else f"{t.estimated_quality:.4f}",
             format_mb(t.predicted_bytes), "not exported" if t.file_bytes is None else format_mb(t.file_bytes),
             {True: "yes", False: "no", None: "—"}[t.fits], t.note] for t in result.trials]
    return _table(["recipe", "structure", "PyTorch estimate (validation)", "size model", "file size",
                   "meets the resource budgets", "note"], rows, "trials-table")


def _provenance(result: FitResult) -> str:
    fitted, metric = result.fitted, metric_name(result)
    scores = result.head_scores or {}
    test = test_quality(fitted)
    rows: list[list[object]] = [
        ["file sizes", "bytes of the exported files", _badge(MEASURED)],
        ["size-model sizes", "predicted from parameters and dtypes before export", _badge(ESTIMATED)],
        ["latency, load time, peak RSS", "timed runs of each artifact in its own process",
         _badge(benchmark_source(fitted.benchmark))],
        ["energy per inference", (fitted.benchmark.energy_detail if fitted.benchmark else "") or
         "a power sensor where the device has one, else the profile's power model",
         _badge(energy_source(fitted.benchmark))],
        [f"{metric} (validation)", "each candidate through its runtime; the search decides on it",
         _badge(MEASURED if search_quality(fitted) else NOT_MEASURED)],
        [f"{metric} (test)", "the dense baseline and the chosen artifact through the runtime"
         + (f", {test.examples} examples" if test else ""), _badge(MEASURED if test else NOT_MEASURED)],
        [f"dense teacher {metric}", "PyTorch on the test split",
         _badge(MEASURED if teacher_quality(result) else NOT_MEASURED)],
        ["head importance", f"{scores.get('criterion', 'no criterion')} on {scores.get('num_examples', '?')} "
         "calibration examples", _badge(MEASURED if scores.get("scores") else NOT_MEASURED)],
        ["agreement with PyTorch", f"worst cosine over {fitted.verification.num_inputs} validation inputs",
         _badge(MEASURED)],
    ]
    unmeasured = [_name(c, result) for c in _candidates(result) if c.benchmark is None]
    if unmeasured:
        rows.append(["latency of " + "; ".join(unmeasured), "these candidates were not benchmarked",
                     _badge(NOT_MEASURED)])
    return _table(["figure", "how it was obtained", "source"], rows, "provenance-table")


def _reproduce(result: FitResult) -> str:
    command = result.reproduce.get("command")
    lead = (f"<p>Command:</p><pre id=\"command\"><code>{esc(command)}</code></pre>" if command else
            "<p>This fit ran through the Python API; the recipe below reproduces it "
            "(<code>result.json</code> holds the full result).</p>")
    recipe = json.dumps(result.reproduce, indent=2, sort_keys=True, default=str)
    shipped = ""
    if result.shipped_files:
        shipped = ("<p>Ship next to the artifact: " + ", ".join(f"<code>{esc(f)}</code>" for f in result.shipped_files)
                   + ".</p>")
    artifact = Path(result.out_dir) / result.fitted.path
    return (f"{lead}<p>Artifact: <code>{esc(artifact)}</code></p>{shipped}<p>Recipe:</p>"
            f'<pre id="recipe"><code>{esc(recipe)}</code></pre>')
