"""The head-importance heat map: one cell per attention head, layers down and heads across, viridis by score."""

import math
from dataclasses import dataclass

from edgeprune.importance.base import HeadScores
from edgeprune.report.facts import MEASURED
from edgeprune.report.plots.base import Figure
from edgeprune.report.plots.canvas import Mark, drawing, to_svg
from edgeprune.report.plots.heat_grid import grid_axes, grid_size

ELEMENT_ID = "plot-head-importance"
REMOVED = "#dee2e6"  # a head removed before it was scored


@dataclass(frozen=True)
class HeadScoreData:
    scores: tuple[tuple[float | None, ...], ...]  # layers × heads; None: removed before scoring
    criterion: str
    num_examples: int | None  # calibration examples the scores were measured on
    normalized_per_layer: bool = False

    @property
    def title(self) -> str:
        return f"Head importance ({self.criterion}), layers × heads"

    @property
    def caption(self) -> str:
        normalized = ", normalized per layer" if self.normalized_per_layer else ""
        examples = "?" if self.num_examples is None else self.num_examples
        return (f"{self.title}{normalized}: {MEASURED} on {examples} calibration examples. "
                "Brighter is more important; grey heads were removed before scoring.")


def head_score_data(head_scores: HeadScores) -> HeadScoreData:
    """From the result's head scores; no rows when no head has a score (removed heads score NaN: None here)."""
    rows = tuple(tuple(None if math.isnan(v) else float(v) for v in row) for row in head_scores.scores)
    scored = any(v is not None for row in rows for v in row)
    return HeadScoreData(rows if scored else (), head_scores.criterion or "unknown criterion",
                         head_scores.num_examples, head_scores.normalized_per_layer)


def figure(data: HeadScoreData) -> Figure:
    if not data.scores:
        return Figure(ELEMENT_ID, empty="No head importance scores recorded.")
    return Figure(ELEMENT_ID, render(data), data.caption)


def render(data: HeadScoreData) -> str:
    """The heat map as an SVG element, viridis by score, with a labelled colour bar; needs at least one score."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize, to_hex
    from matplotlib.patches import Patch, Rectangle

    rows = data.scores
    finite = [v for row in rows for v in row if v is not None]
    heads, layers = max(len(row) for row in rows), len(rows)
    low, high = min(finite), max(finite)
    scale = ScalarMappable(Normalize(low, high if high > low else low + 1), colormaps["viridis"])
    with drawing(*grid_size(layers, heads, extra_width=0, extra_height=70)) as canvas:
        axes = canvas.add_subplot()
        grid_axes(axes, layers, heads, [f"layer {layer}" for layer in range(layers)])
        marks: dict[str, Mark] = {}
        for layer, row in enumerate(rows):
            for head, value in enumerate(row):
                fill = REMOVED if value is None else to_hex(scale.to_rgba(value))
                gid = f"cell-{layer}-{head}"
                axes.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, facecolor=fill, edgecolor="white", gid=gid))
                marks[gid] = Mark("cell", f"layer {layer}, head {head}: "
                                  + ("removed before scoring" if value is None else f"{value:.4g}"))
                if value is not None and heads <= 12:  # the value in the cell while cells are wide enough
                    light = scale.norm(value) > 0.55  # the bright end of viridis needs dark text
                    axes.text(head, layer, f"{value:.2g}", ha="center", va="center", fontsize=8,
                              color="#111" if light else "white")
        # below the grid, where its label has the chart's width whatever the number of layers
        bar = canvas.colorbar(scale, ax=axes, location="bottom", fraction=0.08, pad=0.04, aspect=40)
        bar.set_label(f"importance score ({data.criterion}" + (", normalized per layer)" if data.normalized_per_layer
                                                               else ")"))
        bar.solids.set_rasterized(False)  # vector swatches: no embedded image
        bar.solids.set_edgecolor("face")  # no seams between the swatches
        bar.solids.set_gid("colour-scale")
        marks["colour-scale"] = Mark("colour-scale", f"importance from {low:.3g} (dark) to {high:.3g} (bright)")
        if any(v is None for row in rows for v in row):
            canvas.legend(handles=[Patch(facecolor=REMOVED, label="removed before scoring")],
                          loc="outside upper center", frameon=False)
        return to_svg(canvas, ELEMENT_ID, data.title, marks)
