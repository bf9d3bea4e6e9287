"""Inline SVG drawing for report.html: axes with readable ticks, a colour scale, markers. All text escaped."""

import html
import math
from collections.abc import Callable, Sequence

# viridis at five stops: perceptually uniform and readable with the common colour-vision deficiencies
VIRIDIS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
FONT = 'font-family="system-ui, sans-serif" font-size="12"'


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def num(value: float) -> str:
    """A coordinate: two decimals are below a pixel and keep the page small."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def colour(fraction: float) -> str:
    """Viridis at `fraction` in [0, 1], as #rrggbb."""
    fraction = min(1.0, max(0.0, fraction)) * (len(VIRIDIS) - 1)
    low = min(int(fraction), len(VIRIDIS) - 2)
    t = fraction - low
    rgb = (round(a + (b - a) * t) for a, b in zip(VIRIDIS[low], VIRIDIS[low + 1], strict=True))
    return "#" + "".join(f"{c:02x}" for c in rgb)


def ink_for(fraction: float) -> str:
    """Text colour that stays readable on colour(fraction): the light end of viridis needs dark text."""
    return "#111" if fraction > 0.55 else "#fff"


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 × 10^k apart) inside [low, high]."""
    if not high > low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def span(values: Sequence[float], pad: float = 0.08) -> tuple[float, float]:
    """A padded range around `values`; a single value gets a small range of its own."""
    low, high = min(values), max(values)
    if high - low < 1e-12:
        half = abs(low) * 0.05 or 1.0
        return low - half, high + half
    margin = (high - low) * pad
    return low - margin, high + margin


def open_svg(element_id: str, width: float, height: float, title: str, css_class: str = "plot") -> str:
    return (f'<svg id="{esc(element_id)}" class="{esc(css_class)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {num(width)} {num(height)}" width="{num(width)}" height="{num(height)}" role="img" '
            f'aria-labelledby="{esc(element_id)}-title" {FONT}>'
            f'<title id="{esc(element_id)}-title">{esc(title)}</title>')


def text(x: float, y: float, content: object, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}"{" " + extra if extra else ""}>{esc(content)}</text>'


def line(x1: float, y1: float, x2: float, y2: float, extra: str = 'stroke="#333"') -> str:
    return f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" {extra}/>'


def legend(items: Sequence[tuple[str, str]], x: float, y: float) -> str:
    """Items of (marker SVG drawn around 0,0, label), laid out in one row from (x, y)."""
    parts = []
    for marker, label in items:
        parts.append(f'<g transform="translate({num(x + 6)},{num(y)})">{marker}</g>')
        parts.append(text(x + 16, y + 4, label))
        x += 28 + 6.6 * len(label)
    return f'<g class="legend">{"".join(parts)}</g>'


class Axes:
    """A rectangle of data coordinates mapped onto pixels, with ticks, grid and axis titles."""

    def __init__(self, x_range: tuple[float, float], y_range: tuple[float, float], width: float = 560,
                 height: float = 360, left: float = 72, right: float = 18, top: float = 40, bottom: float = 50) -> None:
        self.x_low, self.x_high = x_range
        self.y_low, self.y_high = y_range
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = left, width - right, top, height - bottom

    def px(self, x: float) -> float:
        return self.left + (x - self.x_low) / (self.x_high - self.x_low) * (self.right - self.left)

    def py(self, y: float) -> float:
        return self.bottom - (y - self.y_low) / (self.y_high - self.y_low) * (self.bottom - self.top)

    def frame(self, x_title: str, y_title: str | None, x_format: Callable[[float], str],
              y_format: Callable[[float], str] | None = None) -> str:
        parts = [f'<rect x="{num(self.left)}" y="{num(self.top)}" width="{num(self.right - self.left)}" '
                 f'height="{num(self.bottom - self.top)}" fill="#fff" stroke="#888"/>']
        for tick in ticks(self.x_low, self.x_high):
            x = self.px(tick)
            parts.append(line(x, self.top, x, self.bottom, 'stroke="#e5e5e5"'))
            parts.append(text(x, self.bottom + 16, x_format(tick), "middle"))
        if y_format is not None:
            for tick in ticks(self.y_low, self.y_high):
                y = self.py(tick)
                parts.append(line(self.left, y, self.right, y, 'stroke="#e5e5e5"'))
                parts.append(text(self.left - 6, y + 4, y_format(tick), "end"))
        parts.append(text((self.left + self.right) / 2, self.height - 10, x_title, "middle", 'font-weight="600"'))
        if y_title:
            middle = (self.top + self.bottom) / 2
            parts.append(text(16, middle, y_title, "middle",
                              f'font-weight="600" transform="rotate(-90 16 {num(middle)})"'))
        return "".join(parts)
