"""The Pareto charts: validation quality against latency, and against file size, one marker per artifact."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from edgeprune.report.plots.base import BUDGET, BUDGET_LINE, CHOSEN, DENSE, FEASIBLE, FRONT, OTHER, Figure
from edgeprune.report.plots.canvas import Mark, drawing, laid_out, place_clear, rounded, to_svg
from edgeprune.search.result import BuiltArtifact, FitResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

WIDTH, HEIGHT = 560, 400  # CSS pixels: two charts side by side on a laptop screen


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
    x_unit: str = ""  # of x and its budget, e.g. "ms"

    @property
    def caption(self) -> str:
        return f"{self.title}. " + (f"Not plotted (not measured): {'; '.join(self.left_out)}." if self.left_out
                                    else "")


def quality_latency(result: FitResult) -> ScatterData:
    percentile = result.budget.latency_percentile
    metric = metric_name(result)
    return scatter_data(result, "plot-quality-latency", f"latency p{percentile} (ms)", "ms",
                        f"Validation {metric} against latency p{percentile}",
                        lambda a: None if a.benchmark is None else latency_at(a.benchmark, percentile),
                        lambda a: a.benchmark is not None and not a.benchmark.measured, result.budget.max_latency_ms)


def quality_size(result: FitResult) -> ScatterData:
    return scatter_data(result, "plot-quality-size", "file size (MB)", "MB",
                        f"Validation {metric_name(result)} against file size", lambda a: a.file_bytes / 1e6,
                        lambda a: False, result.budget.max_mb)


def scatter_data(result: FitResult, element_id: str, x_title: str, x_unit: str, title: str,
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
                       tuple(left_out), x_limit, quality_budget(result), higher_is_better, x_unit)


def figure(data: ScatterData) -> Figure:
    if not data.points:
        return Figure(data.element_id, empty=f"Nothing to plot. {data.caption}")
    return Figure(data.element_id, render(data), data.caption)


def marker_style(point: ScatterPoint) -> dict:
    """Matplotlib marker properties: a square for the dense baseline, hollow circles for estimates."""
    if point.dense:
        return {"marker": "s", "markersize": 9, "color": DENSE}
    ink = FRONT if point.on_front else OTHER
    if point.estimated:
        return {"marker": "o", "markersize": 9, "markerfacecolor": "white", "markeredgecolor": ink,
                "markeredgewidth": 2}
    return {"marker": "o", "markersize": 11 if point.on_front else 9, "markerfacecolor": ink,
            "markeredgecolor": "white", "markeredgewidth": 1}


def render(data: ScatterData) -> str:
    """The chart as an SVG element: the feasible area, budget lines labelled with their value and unit, one marker
    per artifact, a legend of the kinds of marker drawn; the fitted label placed clear of the budget labels."""
    with drawing(WIDTH, HEIGHT) as figure:
        axes = figure.add_subplot()
        marks: dict[str, Mark] = {}
        ordered = sorted(data.points, key=lambda p: (p.chosen, p.on_front))  # the chosen point last, on top
        for index, point in enumerate(ordered):
            axes.plot([point.x], [point.y], linestyle="none", gid=f"point-{index}", zorder=3, **marker_style(point))
            classes = "point" + (" front" if point.on_front else "") + (" chosen" if point.chosen else "")
            marks[f"point-{index}"] = Mark(classes, _tooltip(point, data))
        axes.set_xlabel(data.x_title)
        axes.set_ylabel(f"{data.metric} (validation)")
        if data.metric in PERCENT_METRICS:
            from matplotlib.ticker import PercentFormatter

            axes.yaxis.set_major_formatter(PercentFormatter(1.0, symbol=" %"))
        _limits(axes, data)
        renderer = laid_out(figure)
        budget_boxes = _budgets(axes, data, marks, renderer)
        _labels(axes, data, ordered, marks, renderer, budget_boxes)
        figure.legend(handles=_legend(data), loc="outside upper center", ncols=3, frameon=False)
        return to_svg(figure, data.element_id, data.title, marks)


def _tooltip(point: ScatterPoint, data: ScatterData) -> str:
    return (f"{point.name}: {data.x_title} {point.x:.3g} ({ESTIMATED if point.estimated else MEASURED}), "
            f"{data.metric} {format_metric(point.y, data.metric)}" + (", on the Pareto front" if point.on_front
                                                                      else ""))


def _limits(axes: "Axes", data: ScatterData) -> None:
    """Axes that span every point and every budget, x from 0 at the lowest; fixed, so the shading cannot move them."""
    xs = [p.x for p in data.points] + ([data.x_limit] if data.x_limit is not None else [])
    ys = [p.y for p in data.points] + ([data.y_limit] if data.y_limit is not None else [])
    (x_low, x_high), (y_low, y_high) = _padded(xs, 0.1), _padded(ys, 0.12)
    axes.set_xlim(max(0.0, x_low) if min(xs) >= 0 else x_low, x_high)
    axes.set_ylim(y_low, y_high)


def _padded(values: list[float], pad: float) -> tuple[float, float]:
    low, high = min(values), max(values)
    margin = (high - low) * pad or abs(low) * 0.05 or 1.0
    return low - margin, high + margin


def _budgets(axes: "Axes", data: ScatterData, marks: dict[str, Mark], renderer: object) -> list:
    """The feasible area, the budget lines and their labels; returns the labels' boxes in pixels."""
    from matplotlib.patches import Rectangle

    (x0, x1), (y0, y1) = axes.get_xlim(), axes.get_ylim()
    x_limit, y_limit = data.x_limit, data.y_limit
    if x_limit is None and y_limit is None:
        return []
    right = x1 if x_limit is None else x_limit
    # the quality budget is a floor, or a ceiling when lower is better (perplexity)
    bottom, top = (y0, y1) if y_limit is None else (y_limit, y1) if data.higher_is_better else (y0, y_limit)
    axes.add_patch(Rectangle((x0, bottom), right - x0, top - bottom, color=FEASIBLE, zorder=0, gid="feasible",
                             linewidth=0))
    marks["feasible"] = Mark("feasible")
    boxes = []
    if y_limit is not None:
        axes.axhline(y_limit, gid="budget-y", zorder=2, **BUDGET_LINE)
        near_top = axes.transLimits.transform((x0, y_limit))[1] > 0.9
        word = "floor" if data.higher_is_better else "ceiling"
        label = axes.annotate(f"{word} {format_metric(y_limit, data.metric)}", (1, y_limit),
                              xycoords=("axes fraction", "data"), xytext=(-4, -4 if near_top else 4),
                              textcoords="offset points", ha="right", va="top" if near_top else "bottom",
                              color=BUDGET, gid="label-budget-y")
        marks["budget-y"], marks["label-budget-y"] = Mark("budget"), Mark("budget-label")
        boxes.append(label.get_window_extent(renderer))
    if x_limit is not None:
        axes.axvline(x_limit, gid="budget-x", zorder=2, **BUDGET_LINE)
        right_half = axes.transLimits.transform((x_limit, y0))[0] > 0.5  # the label on the side with room
        text = f"budget {rounded(x_limit)} {data.x_unit}".strip()
        label = axes.annotate(text, (x_limit, 1), xycoords=("data", "axes fraction"), xytext=(0, -4),
                              textcoords="offset points", va="top", color=BUDGET, gid="label-budget-x")
        side = -4 if right_half else 4
        box = place_clear(label, renderer, boxes, axes.get_window_extent(renderer),
                          offsets=((side, -4), (side, -22), (side, 22 - axes.bbox.height)))
        marks["budget-x"], marks["label-budget-x"] = Mark("budget"), Mark("budget-label")
        boxes.append(box)
    return boxes


def _labels(axes: "Axes", data: ScatterData, ordered: list[ScatterPoint], marks: dict[str, Mark], renderer: object,
            keep_clear: list) -> None:
    """'dense' and the fitted label beside their markers, clear of the budget labels, each other and other markers."""
    from matplotlib.transforms import Bbox

    centres = [axes.transData.transform((p.x, p.y)) for p in ordered]
    markers = [Bbox.from_bounds(x - 7, y - 7, 14, 14) for x, y in centres]
    inside = axes.get_window_extent(renderer)
    for index, point in enumerate(ordered):
        if point.chosen:
            axes.plot([point.x], [point.y], linestyle="none", marker="o", markersize=20, markerfacecolor="none",
                      markeredgecolor=CHOSEN, markeredgewidth=2.5, gid="chosen-ring", zorder=4)
            marks["chosen-ring"] = Mark("chosen-ring")
        if not (point.chosen or point.dense):
            continue
        gid = "label-chosen" if point.chosen else "label-dense"
        label = axes.annotate(data.chosen_label if point.chosen else "dense", (point.x, point.y), xytext=(14, 10),
                              textcoords="offset points", va="center", gid=gid, zorder=5,
                              color=CHOSEN if point.chosen else DENSE, weight="bold" if point.chosen else "normal")
        others = [box for i, box in enumerate(markers) if i != index]
        keep_clear.append(place_clear(label, renderer, keep_clear + others, inside))
        marks[gid] = Mark("chosen-label" if point.chosen else "dense-label")


def _legend(data: ScatterData) -> list:
    """One entry per kind of marker the chart draws, and the shading when it is drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    def entry(label: str, **style: object) -> Line2D:
        return Line2D([], [], linestyle="none", label=label, **style)

    points = data.points
    drawn = [
        (any(p.on_front and not p.dense and not p.estimated for p in points),
         entry("Pareto front", **marker_style(ScatterPoint("", 0, 0, on_front=True)))),
        (any(not p.on_front and not p.dense and not p.estimated for p in points),
         entry("other candidate", **marker_style(ScatterPoint("", 0, 0)))),
        (any(p.estimated and not p.dense for p in points),
         entry(f"{data.x_title.split(' (')[0]} estimated", **marker_style(ScatterPoint("", 0, 0, estimated=True)))),
        (any(p.chosen for p in points), entry(data.chosen_label, marker="o", markersize=14, markerfacecolor="none",
                                              markeredgecolor=CHOSEN, markeredgewidth=2.5)),
        (any(p.dense for p in points), entry("dense baseline", **marker_style(ScatterPoint("", 0, 0, dense=True)))),
        (data.x_limit is not None or data.y_limit is not None, Patch(color=FEASIBLE, label="meets the budgets drawn")),
    ]
    return [handle for shown, handle in drawn if shown]
