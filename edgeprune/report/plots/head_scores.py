"""The head-importance heat map: one cell per attention head, layers down and heads across, viridis by score."""

import math
from dataclasses import dataclass

from edgeprune.importance.base import HeadScores
from edgeprune.report.facts import MEASURED
from edgeprune.report.plots.base import Figure
from edgeprune.report.plots.grid import grid
from edgeprune.report.svg import colour, esc, ink_for, num, open_svg, text

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
    """The heat map as an SVG element, with its colour scale on the right; needs at least one score."""
    rows = data.scores
    finite = [v for row in rows for v in row if v is not None]
    heads = max(len(row) for row in rows)
    cell_w, cell_h, left, top = grid(heads)
    width, height = left + heads * cell_w + 90, top + len(rows) * cell_h + 20
    low, high = min(finite), max(finite)
    parts = [open_svg(ELEMENT_ID, width, height, data.title),
             text(left, 12, "head →", extra='font-weight="600" font-size="11"')]
    for head in range(heads):
        parts.append(text(left + (head + 0.5) * cell_w, top - 4, head, "middle", 'font-size="10"'))
    for layer, row in enumerate(rows):
        y = top + layer * cell_h
        parts.append(text(left - 6, y + cell_h / 2 + 4, f"layer {layer}", "end"))
        for head, value in enumerate(row):
            x = left + head * cell_w
            fraction = 0.0 if value is None else 0.5 if high == low else (value - low) / (high - low)
            fill, label = (REMOVED, "removed before scoring") if value is None else (colour(fraction), f"{value:.4g}")
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
    return "".join(parts)
