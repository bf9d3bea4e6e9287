"""Reports of a fit."""

from edgeprune.report.markdown import render_markdown

__all__ = ["render_markdown"]
