"""The fleet report: one row per device (quality, size, latency, the structure it got), a chart of the same, and
what the devices shared. fleet.md for a terminal or a pull request, fleet.html (one file, inline SVG) to open."""

from pathlib import Path

from markupsafe import Markup

from edgeprune.report.facts import format_quality
from edgeprune.report.html import POLICY, environment
from edgeprune.report.plots.base import BUDGET, BUDGET_LINE, CHOSEN, DENSE, OTHER, Figure
from edgeprune.report.plots.canvas import Mark, drawing, rounded, to_svg
from edgeprune.search.fleet_result import FleetMember, FleetResult
from edgeprune.serialization import write_text_atomic

CHART_ID = "plot-fleet"
HEADERS = ("device", "runtime", "status", "recipe", "structure", "size", "p50", "test quality", "dense (test)",
           "candidates built")


def member_row(member: FleetMember) -> tuple[str, ...]:
    if member.file_bytes is None:
        return (member.device, member.runtime, member.status, "—", "—", "—", "—", "—", "—", "0")
    p50 = "not measured" if member.p50_ms is None else f"{member.p50_ms:.2f} ms" + (
        "" if member.latency_measured else " (estimated)")
    return (member.device, member.runtime, member.status, member.recipe, member.structure,
            f"{member.file_bytes / 1e6:.2f} MB", p50, format_quality(member.test_quality),
            format_quality(member.dense_test_quality), str(member.candidates_built))


def shared_line(result: FleetResult) -> str:
    if not result.reused:
        return "Nothing was shared (a fleet of one device, or every device resumed)."
    parts = ", ".join(f"{what} ×{count}" for what, count in sorted(result.reused.items()))
    return (f"Computed once and reused by later devices: {parts}. Exports are shared through the export cache "
            "(a candidate's row says 'cached' in its device's report).")


def render_fleet_markdown(result: FleetResult) -> str:
    fitted = sum(m.fits for m in result.members)
    lines = [f"# edgeprune fleet: {result.task.get('name', 'task')} on {len(result.members)} devices — "
             f"{fitted} of {len(result.members)} fit", "",
             f"| {' | '.join(HEADERS)} |", "|" + "---|" * len(HEADERS)]
    lines += [f"| {' | '.join(cell.replace('|', '/') for cell in member_row(m))} |" for m in result.members]
    lines += ["", shared_line(result), "", f"Elapsed: {result.elapsed_s:.0f} s for the whole fleet.", ""]
    for member in result.members:
        lines.append(f"- **{member.device}** ({member.budget.describe()}): {member.message} "
                     f"— [{member.device}/report.html]({member.device}/report.html)")
    return "\n".join(lines) + "\n"


def render_fleet_html(result: FleetResult) -> str:
    return environment().get_template("fleet.html.j2").render(
        result=result, title=f"edgeprune fleet: {result.task.get('name', 'task')} on {len(result.members)} devices",
        policy=POLICY, headers=HEADERS, rows=[member_row(m) for m in result.members], shared=shared_line(result),
        figure=fleet_figure(result), links=[(m.device, f"{m.device}/report.html", m.message, m.budget.describe())
                                            for m in result.members],
    )


def fleet_figure(result: FleetResult) -> Figure:
    """Three panels side by side, one bar per device: test quality (with the dense model's), size (with the
    device's size budget) and p50 latency (with its latency budget)."""
    members = [m for m in result.members if m.file_bytes is not None]
    caption = ("Per device, the fitted artifact: test quality through the runtime (the dense model's as a dark "
               "tick; a decoder's dense fp32 program takes the teacher's in PyTorch), file size and p50 latency on the "
               "device, each budget as a dashed red tick.")
    if not members:
        return Figure(CHART_ID, empty="No device produced an artifact.")
    names = [m.device for m in members]
    marks: dict[str, Mark] = {}
    with drawing(900, 70 + 34 * len(members)) as figure:
        axes = figure.subplots(1, 3, sharey=True)
        panels = (
            ("test quality", [m.test_quality.value if m.test_quality else 0.0 for m in members],
             [m.dense_test_quality.value if m.dense_test_quality else None for m in members], DENSE, ""),
            ("size (MB)", [m.file_bytes / 1e6 for m in members], [m.budget.max_mb for m in members], BUDGET, " MB"),
            ("p50 latency (ms)", [m.p50_ms or 0.0 for m in members], [m.budget.max_latency_ms for m in members],
             BUDGET, " ms"),
        )
        for column, (label, values, references, ink, unit) in enumerate(panels):
            ax = axes[column]
            for row, (member, value) in enumerate(zip(members, values, strict=True)):
                gid = f"bar-{column}-{row}"
                colour = CHOSEN if member.fits else OTHER
                ax.barh(row, value, color=colour, gid=gid, height=0.6)
                marks[gid] = Mark("bar", f"{member.device}: {label} {rounded(value)}{unit}")
            for row, reference in enumerate(references):
                if reference is not None:
                    style = dict(BUDGET_LINE) if ink == BUDGET else {"color": DENSE, "linewidth": 2}
                    ax.plot([reference, reference], [row - 0.4, row + 0.4], **style)
            ax.set_xlabel(label)
            ax.set_yticks(range(len(members)), names)  # text is escaped when the SVG is written
        axes[0].invert_yaxis()  # the first device on top (the axes share y: once inverts all three)
        svg = to_svg(figure, CHART_ID, "Fitted artifact per device: quality, size and latency", marks)
    return Figure(CHART_ID, Markup(svg), caption)


def write_fleet_reports(result: FleetResult, out: Path) -> None:
    write_text_atomic(out / "fleet.md", render_fleet_markdown(result))
    write_text_atomic(out / "fleet.html", render_fleet_html(result))
