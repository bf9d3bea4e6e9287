"""The latency chart: every timed run of every benchmarked artifact, its quartile box, median and extremes."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeprune.report.artifacts import display_name, finalists, is_chosen, on_front
from edgeprune.report.facts import NOT_MEASURED, latency_at, quantile
from edgeprune.report.plots.base import BUDGET, BUDGET_LINE, CHOSEN, DENSE, FRONT, MUTED, Figure
from edgeprune.report.plots.canvas import Mark, drawing, rounded, to_svg
from edgeprune.search.result import FitResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

ELEMENT_ID = "plot-latency"
TITLE = "Latency per inference: every timed run, its quartile box and median, whiskers to the extremes"


@dataclass(frozen=True)
class LatencyRow:
    """One benchmarked artifact."""

    name: str  # with " (estimated)" when the benchmark did not run on the device
    samples: tuple[float, ...]  # every timed run, in ms; none when the runtime printed only aggregates
    value: float | None  # at the budget's percentile: as reported, else from the samples
    chosen: bool = False
    dense: bool = False
    on_front: bool = False

    @property
    def ink(self) -> str:
        return CHOSEN if self.chosen else DENSE if self.dense else FRONT if self.on_front else MUTED

    @property
    def kind(self) -> str:
        """What its colour means, for the legend."""
        return "fitted" if self.chosen else "dense baseline" if self.dense else "Pareto front" if self.on_front \
            else "other finalist"


@dataclass(frozen=True)
class LatencyData:
    rows: tuple[LatencyRow, ...]
    percentile: int  # of the latency budget: 50, 90 or 99
    limit: float | None = None  # the latency budget, in ms
    device: str = ""  # where the first row was benchmarked, and how
    runtime: str = ""
    threads: int = 0

    @property
    def values(self) -> list[float]:
        """Every latency the chart draws, and the budget: what its axis must span."""
        drawn = [v for row in self.rows for v in (row.samples or [row.value]) if v is not None]
        return drawn + ([self.limit] if self.limit is not None else [])

    @property
    def caption(self) -> str:
        return (f"{TITLE}. Each artifact ran in its own process on {self.device} ({self.runtime}, {self.threads} "
                "threads); estimated rows are labelled.")


def latency_data(result: FitResult) -> LatencyData:
    """The dense baseline and every benchmarked candidate, in the order they were built."""
    percentile, limit = result.budget.latency_percentile, result.budget.max_latency_ms
    benchmarked = finalists(result)
    rows = tuple(LatencyRow(display_name(a, result) + ("" if a.benchmark.measured else " (estimated)"),
                            tuple(a.benchmark.latency_ms or ()), latency_at(a.benchmark, percentile),
                            is_chosen(a, result), a is result.dense, on_front(a, result)) for a in benchmarked)
    if not benchmarked:
        return LatencyData(rows, percentile, limit)
    first = benchmarked[0].benchmark
    return LatencyData(rows, percentile, limit, first.device, first.runtime, first.threads)


def figure(data: LatencyData) -> Figure:
    if not data.rows:
        return Figure(ELEMENT_ID, empty="No artifact was benchmarked, so there are no latency samples.")
    if not data.values:
        return Figure(ELEMENT_ID, empty="The benchmarks recorded no latency figure.")
    return Figure(ELEMENT_ID, render(data), data.caption)


def render(data: LatencyData) -> str:
    """One row per artifact, its p-value and sample count on the right, the budget as a labelled dashed line, a
    legend of the colours and marks drawn; needs at least one latency figure."""
    from matplotlib.lines import Line2D

    rows = data.rows
    with drawing(820, 130 + 42 * len(rows)) as canvas:
        axes = canvas.add_subplot()
        marks: dict[str, Mark] = {}
        for index, row in enumerate(rows):
            marks.update(_row(axes, index, row, data.percentile))
        axes.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
        axes.set_yticks(range(len(rows)), [row.name for row in rows])
        for label, row in zip(axes.get_yticklabels(), rows, strict=True):
            label.set_fontweight("bold" if row.chosen else "normal")
        summaries = axes.secondary_yaxis("right")
        summaries.set_yticks(range(len(rows)), [_summary(row, data.percentile) for row in rows])
        summaries.tick_params(length=0)
        axes.tick_params(axis="y", length=0)
        axes.grid(False, axis="y")
        axes.set_xlabel("latency per inference (ms)")
        low = min(data.values)
        axes.set_xlim(left=max(0.0, low - 0.05 * (max(data.values) - low)))
        if data.limit is not None:
            axes.axvline(data.limit, gid="budget", zorder=1, **BUDGET_LINE)
            axes.annotate(f"budget p{data.percentile} {rounded(data.limit)} ms", (data.limit, 1),
                          xycoords=("data", "axes fraction"), xytext=(0, 4), textcoords="offset points",
                          ha="center", va="bottom", color=BUDGET, gid="label-budget")
            marks["budget"], marks["label-budget"] = Mark("budget"), Mark("budget-label")
        kinds = {row.kind: row.ink for row in rows}  # the colours drawn, in row order
        handles = [Line2D([], [], color=ink, marker="s", linestyle="none", markersize=9, label=kind)
                   for kind, ink in kinds.items()]
        if any(not row.samples and row.value is not None for row in rows):
            handles.append(Line2D([], [], color=MUTED, marker="D", linestyle="none",
                                  label=f"p{data.percentile} only (no samples)"))
        canvas.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
        return to_svg(canvas, ELEMENT_ID, TITLE, marks)


def _summary(row: LatencyRow, percentile: int) -> str:
    value = NOT_MEASURED if row.value is None else f"{row.value:.2f} ms"
    return f"p{percentile} {value}" + (f", n={len(row.samples)}" if row.samples else "")


def _row(axes: "Axes", index: int, row: LatencyRow, percentile: int) -> dict[str, Mark]:
    """Whisker from fastest to slowest run, quartile box, median, every run as a dot (jittered to stay visible)."""
    from matplotlib.patches import Rectangle

    ink, samples, tip = row.ink, row.samples, f"{row.name}: {_summary(row, percentile)}"
    if samples:
        q1, median, q3 = (quantile(list(samples), f) for f in (0.25, 0.5, 0.75))
        axes.plot([min(samples), max(samples)], [index, index], color=ink, linewidth=1, gid=f"whisker-{index}")
        axes.add_patch(Rectangle((q1, index - 0.2), q3 - q1, 0.4, facecolor=ink, alpha=0.25, edgecolor=ink,
                                 gid=f"box-{index}"))
        axes.plot([median, median], [index - 0.2, index + 0.2], color=ink, linewidth=2.5, gid=f"median-{index}")
        jitter = [((i * 0.618034) % 1 - 0.5) * 0.3 for i in range(len(samples))]  # golden ratio: even, repeatable
        axes.plot(samples, [index + j for j in jitter], linestyle="none", marker="o", markersize=3.5, color=ink,
                  alpha=0.6, gid=f"samples-{index}")
        return {f"box-{index}": Mark("box", tip), f"samples-{index}": Mark("samples", tip),
                f"whisker-{index}": Mark("whisker"), f"median-{index}": Mark("median")}
    if row.value is not None:  # a native tool that printed only aggregates: its percentile as a diamond
        axes.plot([row.value], [index], linestyle="none", marker="D", markersize=9, color=ink, gid=f"aggregate-{index}")
        return {f"aggregate-{index}": Mark("aggregate", tip)}
    return {}
