"""report.html: one self-contained page a team can act on.

Inline CSS and SVG only: no script, font, image or style sheet is fetched, and the page's content
security policy forbids it, so the file reads the same offline, attached to a ticket, years later.
Every figure says whether it was measured (and on which device) or estimated.

The page is templates/report.html.j2, rendered with autoescaping: every string from the result is
escaped there. The charts come from the modules of report.plots as SVG that escapes its own text,
and only that SVG is marked safe, here.
"""

import dataclasses
import functools
import json
from pathlib import Path

import jinja2
from markupsafe import Markup

from edgeprune.report import tables
from edgeprune.report.artifacts import front_names
from edgeprune.report.facts import emulation_note, format_quality, metric_name, runtime_summary, teacher_quality
from edgeprune.report.plots import generation, head_scores, kept_heads, latency, pareto
from edgeprune.report.plots.base import Figure
from edgeprune.search.result import FitResult

TEMPLATES = Path(__file__).with_name("templates")
SECTIONS = {
    "summary": "Summary", "device": "Device and runtime", "budgets": "Budgets",
    "pareto": "Quality against latency and size", "heads": "Attention heads", "latency": "Latency of the finalists",
    "candidates": "Candidates", "trials": "Search trials", "provenance": "Measured and estimated figures",
    "reproduce": "Reproduce",
}
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.tests["span"] = lambda value: isinstance(value, tables.Span)
    env.tests["numeric"] = lambda value: isinstance(value, int | float) and not isinstance(value, bool)
    return env


def render_html(result: FitResult) -> str:
    """The fit as one HTML page with inline SVG figures; renders whatever fields the result has."""
    return environment().get_template("report.html.j2").render(
        result=result, title=f"edgeprune fit: {result.task.get('name', 'task')} on {result.device}",
        policy=POLICY, headings=SECTIONS, metric=metric_name(result),
        teacher=format_quality(teacher_quality(result)), elapsed=f"{result.elapsed_s:.0f}",
        timings=_timings(result), front=front_names(result), tables=_tables(result), figures=_figures(result),
        command=result.reproduce.get("command"), artifact=Path(result.out_dir) / result.fitted.path,
        recipe=json.dumps(result.reproduce, indent=2, sort_keys=True, default=str), emulation=emulation_note(result),
        runtimes=runtime_summary(result),
    )


def _tables(result: FitResult) -> dict[str, tables.Table | None]:
    return {"summary": tables.summary_table(result), "regressions": tables.regressions_table(result),
            "device": tables.device_table(result), "budgets": tables.budget_table(result),
            "candidates": tables.candidates_table(result), "trials": tables.trials_table(result),
            "provenance": tables.provenance_table(result)}


def _figures(result: FitResult) -> dict[str, Figure]:
    figures = {
        "quality_latency": pareto.figure(pareto.quality_latency(result)),
        "quality_size": pareto.figure(pareto.quality_size(result)),
        "head_scores": head_scores.figure(head_scores.head_score_data(result.head_scores)),
        "kept_heads": kept_heads.figure(kept_heads.kept_heads_data(result.fitted)),
        "latency": latency.figure(latency.latency_data(result)),
        "generation": generation.figure(generation.generation_data(result)),
    }
    # the plot modules escape every string they draw, so their SVG goes into the page as it is
    return {name: dataclasses.replace(figure, svg=Markup(figure.svg)) for name, figure in figures.items()}


def _timings(result: FitResult) -> str:
    """" (scoring 20 s, search 250 s)" after the fit's elapsed time; "" when no stage was timed."""
    if not result.timings_s:
        return ""
    return " (" + ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in result.timings_s.items()) + ")"
