"""The kept-heads map: one cell per attention head of the fitted artifact, filled when it is kept."""

from dataclasses import dataclass

from edgeprune.report.plots.base import CHOSEN, Figure, square
from edgeprune.report.plots.grid import grid
from edgeprune.report.svg import legend, num, open_svg, text
from edgeprune.search.result import BuiltArtifact

ELEMENT_ID = "plot-kept-heads"
TITLE = "Heads the fitted artifact keeps, per layer"
EMPTY = 'fill="#fff" stroke="#adb5bd"'  # a removed head


@dataclass(frozen=True)
class KeptHeadsData:
    num_heads: tuple[int, ...]  # per layer, before pruning
    kept_heads: tuple[tuple[int, ...], ...]  # per layer; none for a removed layer
    layers_removed: frozenset[int] = frozenset()
    strategy: str = "unknown strategy"
    criterion: str = "unknown criterion"

    @property
    def caption(self) -> str:
        kept = sum(map(len, self.kept_heads))
        return f"{TITLE}: {kept} of {sum(self.num_heads)} heads kept ({self.strategy} over {self.criterion})."


def kept_heads_data(artifact: BuiltArtifact) -> KeptHeadsData:
    """From the artifact's pruning plan; no layers when it records none."""
    plan = artifact.plan.heads
    if plan is None or not plan.num_heads:
        return KeptHeadsData((), ())
    gone = frozenset(artifact.layers_removed or ())
    kept = tuple(() if layer in gone else tuple(heads) for layer, heads in enumerate(plan.kept_heads))
    return KeptHeadsData(tuple(plan.num_heads), kept, gone, plan.strategy or "unknown strategy",
                         plan.criterion or "unknown criterion")


def figure(data: KeptHeadsData) -> Figure:
    if not data.num_heads:
        return Figure(ELEMENT_ID, empty="The fitted artifact records no head plan.")
    return Figure(ELEMENT_ID, render(data), data.caption)


def render(data: KeptHeadsData) -> str:
    """The map as an SVG element, with kept/total at the end of each layer's row."""
    heads = max(data.num_heads)
    cell_w, cell_h, left, top = grid(heads)
    width, height = left + heads * cell_w + 80, top + len(data.num_heads) * cell_h + 20
    parts = [open_svg(ELEMENT_ID, width, height, TITLE),
             legend([(square(f'fill="{CHOSEN}"'), "kept"), (square(EMPTY), "removed")], left, 12)]
    for layer, (total, kept) in enumerate(zip(data.num_heads, data.kept_heads, strict=True)):
        y = top + layer * cell_h
        removed_layer = " (removed)" if layer in data.layers_removed else ""
        parts.append(text(left - 6, y + cell_h / 2 + 4, f"layer {layer}{removed_layer}", "end"))
        for head in range(total):
            is_kept = head in kept
            style = f'fill="{CHOSEN}" stroke="#fff"' if is_kept else EMPTY
            state = "kept" if is_kept else "removed"
            parts.append(f'<rect class="{state}" x="{num(left + head * cell_w + 1)}" y="{num(y + 1)}" '
                         f'width="{num(cell_w - 2)}" height="{num(cell_h - 2)}" {style}>'
                         f"<title>layer {layer}, head {head}: {state}</title></rect>")
        parts.append(text(left + heads * cell_w + 8, y + cell_h / 2 + 4, f"{len(kept)}/{total}"))
    parts.append("</svg>")
    return "".join(parts)
