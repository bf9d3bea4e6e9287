"""Jetson `tegrastats`: one status line per interval, with rails and temperatures.

JetPack 5/6 lines carry `VDD_IN 5704mW/5704mW` (instant/average, mW); JetPack 4 lines carry
`POM_5V_IN 3023/3023` (mW, no unit). Temperatures look like `CPU@47.125C` or `cpu@45.5C`.
"""

import re

from .base import PowerSensor, SensorUnavailable, register_power

RAIL = re.compile(r"\b(?P<rail>[A-Z][A-Z0-9_]*)\s+(?P<now>\d+)(?:mW)?/(?P<avg>\d+)(?:mW)?\b")
TEMPERATURE = re.compile(r"\b(?P<zone>[A-Za-z][A-Za-z0-9_]*)@(?P<value>-?\d+(?:\.\d+)?)C\b")
INPUT_RAILS = ("VDD_IN", "POM_5V_IN")


def parse_tegrastats_line(line: str) -> tuple[dict[str, float], dict[str, float]]:
    """(instant watts per rail, °C per zone) from one tegrastats line."""
    rails = {m["rail"]: int(m["now"]) / 1000 for m in RAIL.finditer(line)}
    temperatures = {m["zone"]: float(m["value"]) for m in TEMPERATURE.finditer(line)}
    return rails, temperatures


def input_power_w(line: str) -> float:
    rails, _ = parse_tegrastats_line(line)
    for rail in INPUT_RAILS:
        if rail in rails:
            return rails[rail]
    raise SensorUnavailable(f"no {' or '.join(INPUT_RAILS)} rail in the tegrastats line {line[:80]!r}")


@register_power
class TegrastatsSensor(PowerSensor):
    name = "tegrastats"
    sample_interval_s = 0.0  # each read already waits one tegrastats interval

    def read(self) -> float:
        # tegrastats runs until stopped; `head` takes the first line (after one --interval) and ends it
        line = self.env.run(["sh", "-c", "tegrastats --interval 100 | head -n 1"])
        if not line.strip():
            raise SensorUnavailable("tegrastats printed nothing (is it installed? it may need root)")
        return input_power_w(line)

    def describe(self) -> str:
        return "tegrastats VDD_IN (module input)"
