"""Reports of a fit: report.md and a self-contained report.html, sharing how figures are checked and labelled."""

from edgeprune.report.html import render_html
from edgeprune.report.markdown import render_markdown

__all__ = ["render_html", "render_markdown"]
