"""What every chart shares: its colours, its budget lines, and the Figure the page shows it in."""

from dataclasses import dataclass

FRONT = "#d9480f"  # candidates on the Pareto front
CHOSEN = "#1864ab"  # the fitted artifact, and the heads it keeps
OTHER = "#adb5bd"  # candidates off the front
DENSE = "#343a40"  # the dense baseline
MUTED = "#868e96"  # finalists off the front, in the latency chart
BUDGET = "#c92a2a"  # budget lines and their labels
FEASIBLE = "#ebfbee"  # the area that meets the budgets drawn
BUDGET_LINE = {"color": BUDGET, "linestyle": (0, (6, 4)), "linewidth": 1.5}  # matplotlib line properties


@dataclass(frozen=True)
class Figure:
    """One chart as the page shows it: the SVG and its caption, or why there is nothing to draw."""

    element_id: str
    svg: str = ""  # "": nothing to draw, `empty` says why
    caption: str = ""
    empty: str = ""

