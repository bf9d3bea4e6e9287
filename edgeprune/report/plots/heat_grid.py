"""The layers × heads grid both head charts draw on: layer 0 at the top, one labelled tick per head."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def grid_size(layers: int, heads: int, extra_width: float = 0, extra_height: float = 0) -> tuple[float, float]:
    """Width and height in pixels of a chart whose cells stay readable: 12 to 40 px wide, 10 to 28 px high."""
    cell_w = min(40.0, max(12.0, 480 / heads))
    cell_h = min(28.0, max(10.0, cell_w * 0.7))
    return 150 + heads * cell_w + extra_width, 110 + layers * cell_h + extra_height


def grid_axes(axes: "Axes", layers: int, heads: int, layer_names: list[str]) -> None:
    axes.set_xlim(-0.5, heads - 0.5)
    axes.set_ylim(layers - 0.5, -0.5)  # layer 0 on top
    axes.set_xticks(range(heads), [str(h) for h in range(heads)])
    axes.set_yticks(range(layers), layer_names)
    axes.xaxis.tick_top()
    axes.xaxis.set_label_position("top")
    axes.set_xlabel("attention head")
    axes.tick_params(length=0)
    axes.grid(False)
    for spine in axes.spines.values():
        spine.set_visible(False)
