"""The latency chart: every timed run of every benchmarked artifact, its quartile box, median and extremes."""

from dataclasses import dataclass

from edgeprune.report.artifacts import display_name, finalists, is_chosen, on_front
from edgeprune.report.facts import NOT_MEASURED, latency_at, quantile
from edgeprune.report.plots.base import BUDGET, BUDGET_LINE, CHOSEN, DENSE, FRONT, MUTED, Figure
from edgeprune.report.svg import Axes, esc, line, num, open_svg, span, text
from edgeprune.search.result import FitResult

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
    """One row per artifact, the budget as a dashed line; needs at least one latency figure."""
    low, high = span(data.values, 0.05)
    row_h, left = 40.0, max(160.0, 7.4 * max(len(r.name) for r in data.rows) + 16)  # the longest name, in bold
    height = 40 + row_h * len(data.rows) + 50
    axes = Axes((max(0.0, low), high), (0.0, 1.0), width=left + 640, height=height, left=left, right=120, top=40)
    parts = [open_svg(ELEMENT_ID, axes.width, height, TITLE),
             axes.frame("latency per inference (ms)", None, lambda v: f"{v:g}")]
    if data.limit is not None:
        x = axes.px(data.limit)
        parts.append(line(x, axes.top, x, axes.bottom, BUDGET_LINE))
        parts.append(text(x, axes.top - 6, f"budget p{data.percentile} {data.limit:g} ms", "middle",
                          f'fill="{BUDGET}"'))
    for index, row in enumerate(data.rows):
        parts.append(_row(row, axes, axes.top + (index + 0.5) * row_h, data.percentile))
    parts.append("</svg>")
    return "".join(parts)


def _row(row: LatencyRow, axes: Axes, middle: float, percentile: int) -> str:
    ink, samples = row.ink, row.samples
    value = NOT_MEASURED if row.value is None else f"{row.value:.2f} ms"
    summary = f"p{percentile} {value}" + (f", n={len(samples)}" if samples else "")
    parts = [f'<g class="finalist"><title>{esc(row.name)}: {esc(summary)}</title>',
             text(axes.left - 8, middle + 4, row.name, "end", 'font-weight="600"' if row.chosen else "")]
    if samples:
        q1, median, q3 = (quantile(list(samples), f) for f in (0.25, 0.5, 0.75))
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
    elif row.value is not None:  # a native tool that printed only aggregates: its percentile as a diamond
        x = axes.px(row.value)
        parts.append(f'<path class="aggregate" d="M{num(x)} {num(middle - 6)}l6 6-6 6-6-6z" fill="{ink}"/>')
    parts.append(text(axes.right + 8, middle + 4, summary, extra='font-size="11"'))
    parts.append("</g>")
    return "".join(parts)
