"""The charts of report.html, one module each: a small dataclass of what to draw in, an SVG string out."""
