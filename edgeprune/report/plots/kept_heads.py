"""The kept-heads map: one cell per attention head of the fitted artifact, filled when it is kept."""

from dataclasses import dataclass

from edgeprune.report.plots.base import CHOSEN, Figure
from edgeprune.report.plots.canvas import Mark, drawing, to_svg
from edgeprune.report.plots.heat_grid import grid_axes, grid_size
from edgeprune.search.result import BuiltArtifact

ELEMENT_ID = "plot-kept-heads"
TITLE = "Heads the fitted artifact keeps, per layer"
REMOVED_EDGE = "#adb5bd"  # a removed head: white with a grey edge


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
    """The map as an SVG element, kept/total per layer on the right, a legend of the cell kinds drawn."""
    from matplotlib.patches import Patch, Rectangle

    heads, layers = max(data.num_heads), len(data.num_heads)
    with drawing(*grid_size(layers, heads, extra_width=80)) as canvas:
        axes = canvas.add_subplot()
        names = [f"layer {layer}" + (" (removed)" if layer in data.layers_removed else "") for layer in range(layers)]
        grid_axes(axes, layers, heads, names)
        marks: dict[str, Mark] = {}
        for layer, (total, kept) in enumerate(zip(data.num_heads, data.kept_heads, strict=True)):
            for head in range(total):
                state = "kept" if head in kept else "removed"
                style = {"facecolor": CHOSEN, "edgecolor": "white"} if state == "kept" else \
                    {"facecolor": "white", "edgecolor": REMOVED_EDGE}
                gid = f"cell-{layer}-{head}"
                axes.add_patch(Rectangle((head - 0.45, layer - 0.45), 0.9, 0.9, gid=gid, linewidth=1, **style))
                marks[gid] = Mark(state, f"layer {layer}, head {head}: {state}")
        counts = axes.secondary_yaxis("right")
        counts.set_yticks(range(layers), [f"{len(kept)}/{total}" for total, kept in
                                          zip(data.num_heads, data.kept_heads, strict=True)])
        counts.set_ylabel("kept / heads")
        counts.tick_params(length=0)
        drawn = [state for state in ("kept", "removed") if any(m.css_class == state for m in marks.values())]
        handles = {"kept": Patch(facecolor=CHOSEN, label="kept"),
                   "removed": Patch(facecolor="white", edgecolor=REMOVED_EDGE, label="removed")}
        canvas.legend(handles=[handles[state] for state in drawn], loc="outside upper center", ncols=2,
                      frameon=False)
        return to_svg(canvas, ELEMENT_ID, TITLE, marks)
