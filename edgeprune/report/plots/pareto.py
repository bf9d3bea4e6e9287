"""The Pareto charts: validation quality against latency, and against file size, one marker per artifact."""

from collections.abc import Callable
from dataclasses import dataclass

from edgeprune.report.artifacts import candidates, display_name, is_chosen, on_front
from edgeprune.report.facts import (
    ESTIMATED,
    MEASURED,
    PERCENT_METRICS,
    format_metric,
    latency_at,
    metric_name,
    quality_budget,
    search_quality,
)
from edgeprune.report.plots.base import BUDGET, BUDGET_LINE, CHOSEN, DENSE, FEASIBLE, FRONT, OTHER, Figure, square
from edgeprune.report.svg import Axes, esc, legend, line, num, open_svg, span, text, ticks
from edgeprune.search.result import BuiltArtifact, FitResult


@dataclass(frozen=True)
class ScatterPoint:
    """One artifact: x is latency (ms) or file size (MB), y its validation quality in the task's metric."""

    name: str
    x: float
    y: float
    on_front: bool = False
    chosen: bool = False
    dense: bool = False
    estimated: bool = False  # x was estimated, not measured


@dataclass(frozen=True)
class ScatterData:
    element_id: str
    title: str
    x_title: str  # with its unit
    metric: str  # the task's quality metric, e.g. "accuracy"
    chosen_label: str  # what the chosen artifact is called, e.g. "fitted"
    points: tuple[ScatterPoint, ...]
    left_out: tuple[str, ...] = ()  # artifacts without an x figure or a validation quality
    x_limit: float | None = None  # the budget on x
    y_limit: float | None = None  # the quality budget: a floor, or a ceiling when lower is better
    higher_is_better: bool = True

    @property
    def caption(self) -> str:
        return f"{self.title}. " + (f"Not plotted (not measured): {'; '.join(self.left_out)}." if self.left_out
                                    else "")


def quality_latency(result: FitResult) -> ScatterData:
    percentile = result.budget.latency_percentile
    metric = metric_name(result)
    return scatter_data(result, "plot-quality-latency", f"latency p{percentile} (ms)",
                        f"Validation {metric} against latency p{percentile}",
                        lambda a: None if a.benchmark is None else latency_at(a.benchmark, percentile),
                        lambda a: a.benchmark is not None and not a.benchmark.measured, result.budget.max_latency_ms)


def quality_size(result: FitResult) -> ScatterData:
    return scatter_data(result, "plot-quality-size", "file size (MB)",
                        f"Validation {metric_name(result)} against file size", lambda a: a.file_bytes / 1e6,
                        lambda a: False, result.budget.max_mb)


def scatter_data(result: FitResult, element_id: str, x_title: str, title: str,
                 x_of: Callable[[BuiltArtifact], float | None], estimated_of: Callable[[BuiltArtifact], bool],
                 x_limit: float | None) -> ScatterData:
    """The dense baseline and every candidate that has both figures; the rest named as left out."""
    artifacts = [result.dense, *candidates(result)]
    points, left_out = [], []
    for artifact in artifacts:
        x, quality = x_of(artifact), search_quality(artifact)
        if x is None or quality is None:
            left_out.append(display_name(artifact, result))
            continue
        points.append(ScatterPoint(display_name(artifact, result), x, quality.value, on_front(artifact, result),
                                   is_chosen(artifact, result), artifact is result.dense, estimated_of(artifact)))
    higher_is_better = next((q.higher_is_better for q in map(search_quality, artifacts) if q is not None), True)
    return ScatterData(element_id, title, x_title, metric_name(result), result.fitted.label, tuple(points),
                       tuple(left_out), x_limit, quality_budget(result), higher_is_better)


def figure(data: ScatterData) -> Figure:
    if not data.points:
        return Figure(data.element_id, empty=f"Nothing to plot. {data.caption}")
    return Figure(data.element_id, render(data), data.caption)


def tick_format(low: float, high: float, metric: str) -> Callable[[float], str]:
    """Quality ticks with as few decimals as show them exactly: 94 %, 94.5 %, 94.25 %."""
    if metric not in PERCENT_METRICS:
        return lambda v: f"{v:.4g}"
    percents = [100 * v for v in ticks(low, high)]
    decimals = next((d for d in range(4) if all(abs(round(p, d) - p) < 1e-6 for p in percents)), 4)
    return lambda v: f"{100 * v:.{decimals}f} %"


def marker(point: ScatterPoint) -> str:
    if point.dense:
        return square(f'fill="{DENSE}"')
    fill = FRONT if point.on_front else OTHER
    if point.estimated:
        return f'<circle r="5.5" fill="#fff" stroke="{fill}" stroke-width="2" stroke-dasharray="2 2"/>'
    return f'<circle r="{6.5 if point.on_front else 5}" fill="{fill}" stroke="#fff" stroke-width="1"/>'


def render(data: ScatterData) -> str:
    """The chart as an SVG element: the budgets' feasible area and lines, then one marker group per point."""
    x_values = [p.x for p in data.points] + ([data.x_limit] if data.x_limit is not None else [])
    x_low, x_high = span(x_values)
    y_limit = data.y_limit
    axes = Axes((max(0.0, x_low), x_high), span([p.y for p in data.points] + ([y_limit] if y_limit is not None
                                                                              else [])))
    parts = [open_svg(data.element_id, axes.width, axes.height, data.title),
             axes.frame(data.x_title, f"{data.metric} (validation)", lambda v: f"{v:g}",
                        tick_format(axes.y_low, axes.y_high, data.metric))]
    limit_x = axes.px(data.x_limit) if data.x_limit is not None else axes.right
    limit_y = axes.py(y_limit) if y_limit is not None else axes.bottom
    # the quality budget is a floor, or a ceiling when lower is better (perplexity)
    feasible_top, feasible_bottom = (axes.top, limit_y) if data.higher_is_better or y_limit is None else \
        (limit_y, axes.bottom)
    if data.x_limit is not None or y_limit is not None:
        parts.append(f'<rect class="feasible" x="{num(axes.left)}" y="{num(feasible_top)}" '
                     f'width="{num(max(0.0, limit_x - axes.left))}" '
                     f'height="{num(max(0.0, feasible_bottom - feasible_top))}" fill="{FEASIBLE}"/>')
    if data.x_limit is not None:
        parts.append(line(limit_x, axes.top, limit_x, axes.bottom, BUDGET_LINE))
        right_half = limit_x > (axes.left + axes.right) / 2  # keep the label inside the plot
        parts.append(text(limit_x + (-4 if right_half else 4), axes.top + 14, f"budget {data.x_limit:g}",
                          "end" if right_half else "start", f'fill="{BUDGET}"'))
    if y_limit is not None:
        parts.append(line(axes.left, limit_y, axes.right, limit_y, BUDGET_LINE))
        parts.append(text(axes.right - 4, limit_y - 4, f"{'floor' if data.higher_is_better else 'ceiling'} "
                          f"{format_metric(y_limit, data.metric)}", "end", f'fill="{BUDGET}"'))
    for point in sorted(data.points, key=lambda p: (p.chosen, p.on_front)):  # the chosen point last, on top
        parts.append(_point(point, axes, data))
    parts.append(legend([
        (f'<circle r="6.5" fill="{FRONT}"/>', "Pareto front"), (f'<circle r="5" fill="{OTHER}"/>', "candidate"),
        (f'<circle r="6" fill="none" stroke="{CHOSEN}" stroke-width="2.5"/>', data.chosen_label),
        (square(f'fill="{DENSE}"'), "dense baseline"),
    ], axes.left, 18))
    parts.append("</svg>")
    return "".join(parts)


def _point(point: ScatterPoint, axes: Axes, data: ScatterData) -> str:
    tip = (f"{point.name}: {data.x_title} {point.x:.3g} ({ESTIMATED if point.estimated else MEASURED}), "
           f"{data.metric} {format_metric(point.y, data.metric)}" + (", on the Pareto front" if point.on_front else ""))
    ring = (f'<circle class="chosen-ring" r="11" fill="none" stroke="{CHOSEN}" stroke-width="2.5"/>'
            f'<text x="14" y="-10" fill="{CHOSEN}" font-weight="600">{esc(data.chosen_label)}</text>'
            if point.chosen else "")
    dense_label = f'<text x="9" y="14" fill="{DENSE}">dense</text>' if point.dense else ""
    classes = "point" + (" front" if point.on_front else "") + (" chosen" if point.chosen else "")
    return (f'<g class="{classes}" transform="translate({num(axes.px(point.x))},{num(axes.py(point.y))})">'
            f"<title>{esc(tip)}</title>{marker(point)}{ring}{dense_label}</g>")
