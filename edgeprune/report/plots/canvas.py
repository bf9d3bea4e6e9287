"""Drawing a chart with matplotlib and handing it to the page as inline SVG.

Text is written as SVG `<text>` (`svg.fonttype = "none"`), so the page stays searchable and selectable and
no font or image is embedded or fetched; the font stack starts with DejaVu Sans, the font matplotlib lays the
text out with, so a browser that has it draws every label exactly where the layout measured it.

Marks a test or a reader needs to find get a matplotlib `gid`; `to_svg` prefixes every id with the chart's
element id (several charts share one page, and ids must be unique in it), adds the CSS class and the hover
tooltip (`<title>`) of each mark, and drops matplotlib's metadata.
"""

import html
import io
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib loads when a chart is drawn, not when edgeprune is imported
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox

SVG_NS, XLINK_NS = "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)
DPI = 72  # SVG user units are points at 72 per inch: one unit, one CSS pixel at the size the page draws it
FONT_STACK = "'DejaVu Sans', 'Liberation Sans', Arial, Helvetica, sans-serif"
STYLE = {
    "svg.fonttype": "none", "svg.hashsalt": "edgeprune",  # text as text; ids that do not change between runs
    "font.family": ["DejaVu Sans"], "font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11,
    "axes.labelweight": "bold", "xtick.labelsize": 10, "ytick.labelsize": 10, "legend.fontsize": 10,
    "text.parse_math": False,  # a "$" in a model or label name is a dollar sign, not mathtext
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e9ecef",
    "axes.axisbelow": True, "axes.labelpad": 6, "figure.dpi": DPI, "savefig.dpi": DPI, "figure.facecolor": "white",
}


@dataclass(frozen=True)
class Mark:
    """A drawn artist's CSS class and hover text, found by the `gid` it was drawn with."""

    css_class: str
    tooltip: str = ""


@contextmanager
def drawing(width_px: float, height_px: float) -> Iterator["Figure"]:
    """A matplotlib Figure of that size in CSS pixels, with constrained layout (labels clear of tick labels)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, layout="constrained")
        FigureCanvasAgg(figure)  # a canvas to measure text on; the SVG backend writes the file
        yield figure


def laid_out(figure: "Figure") -> "RendererAgg":
    """Run the layout once and return the renderer that measured it, so labels can be placed in final pixels."""
    figure.canvas.draw()
    return figure.canvas.get_renderer()


def to_svg(figure: "Figure", element_id: str, title: str, marks: dict[str, Mark]) -> str:
    """The figure as one `<svg>` element for the page: ids prefixed, marks classed and titled, no metadata."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    root = ET.fromstring(buffer.getvalue())
    for metadata in root.findall(f"{{{SVG_NS}}}metadata"):
        root.remove(metadata)
    prefix = f"{element_id}-"
    for element in root.iter():
        _prefix_references(element, prefix)
        gid = element.get("id", "")[len(prefix):]
        if gid in marks:
            mark = marks[gid]
            element.set("class", mark.css_class)
            if mark.tooltip:
                tip = ET.Element(f"{{{SVG_NS}}}title")
                tip.text = mark.tooltip
                element.insert(0, tip)
        if element.tag == f"{{{SVG_NS}}}text":  # the font stack once, on the root, instead of on every label
            element.set("style", "; ".join(p for p in element.get("style", "").split("; ")
                                            if not p.startswith("font-family")))
    width, height = root.get("viewBox").split()[2:]
    root.attrib.update({"width": width, "height": height, "role": "img", "aria-labelledby": f"{element_id}-title",
                        "font-family": FONT_STACK})
    heading = ET.Element(f"{{{SVG_NS}}}title", {"id": f"{element_id}-title"})
    heading.text = title
    root.insert(0, heading)
    # the id first, so that the page (and a reader of its source) finds each chart as `<svg id="...`
    return ET.tostring(root, encoding="unicode").replace(
        "<svg ", f'<svg id="{html.escape(element_id)}" class="plot" ', 1)


def _prefix_references(element: ET.Element, prefix: str) -> None:
    if "id" in element.attrib:
        element.set("id", prefix + element.get("id"))
    href = f"{{{XLINK_NS}}}href"
    if element.get(href, "").startswith("#"):
        element.set(href, "#" + prefix + element.get(href)[1:])
    for name, value in element.attrib.items():
        if "url(#" in value:
            element.set(name, value.replace("url(#", "url(#" + prefix))


def rounded(value: float) -> str:
    """A budget or figure for a label: three significant digits, no exponent, no trailing zeros (0.8, 12, 1250)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{round(value, decimals):.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{round(value):d}"


# ---- labels that keep clear of each other ---------------------------------------------------------------------

OFFSETS = ((10, 8), (10, -16), (-10, 8), (-10, -16), (12, -4), (-12, -4), (0, 12), (0, -20))  # points from a mark


def place_clear(label: "Annotation", renderer: "RendererAgg", keep_clear: Iterable["Bbox"], inside: "Bbox",
                offsets: Sequence[tuple[float, float]] = OFFSETS) -> "Bbox":
    """Move an annotation to the first offset (in points) where it overlaps nothing in `keep_clear` and stays
    `inside`; where none is clear, the offset that overlaps least. Returns the box it ends in, in pixels."""
    keep_clear = list(keep_clear)
    best: tuple[float, tuple[float, float]] | None = None
    for dx, dy in offsets:
        label.set_position((dx, dy))
        label.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
        box = label.get_window_extent(renderer)
        outside = max(0.0, inside.x0 - box.x0) + max(0.0, box.x1 - inside.x1) + \
            max(0.0, inside.y0 - box.y0) + max(0.0, box.y1 - inside.y1)
        clash = sum(shared_area(box, other) for other in keep_clear) + 100 * outside
        if clash == 0:
            return box
        if best is None or clash < best[0]:
            best = (clash, (dx, dy))
    dx, dy = best[1]
    label.set_position((dx, dy))
    label.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
    return label.get_window_extent(renderer)


def shared_area(a: "Bbox", b: "Bbox") -> float:
    """Pixels two boxes share, counting touching edges: 0 when they are clear of each other."""
    width = min(a.x1, b.x1) + 1 - max(a.x0, b.x0)
    height = min(a.y1, b.y1) + 1 - max(a.y0, b.y0)
    return max(0.0, width) * max(0.0, height)
