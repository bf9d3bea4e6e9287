"""Raspberry Pi firmware throttling state from `vcgencmd get_throttled` (prints `throttled=0x50000`).

Bits 0–3 are the present state (under-voltage, ARM frequency capped, throttled, soft temperature
limit); bits 16–19 are the same conditions since boot, so a bit that appears there between two reads
happened during the run even if it has cleared by the end.
"""

import re

from .base import SensorUnavailable, ThermalReader, ThermalState, register_thermal

CONDITIONS = ("under-voltage", "arm frequency capped", "throttled", "soft temperature limit")


def parse_get_throttled(text: str) -> int:
    match = re.search(r"throttled=(0x[0-9a-fA-F]+|\d+)", text)
    if match is None:
        raise SensorUnavailable(f"unexpected `vcgencmd get_throttled` output {text[:60]!r}")
    return int(match.group(1), 0)


def conditions(bits: int, shift: int) -> list[str]:
    return [name for index, name in enumerate(CONDITIONS) if bits >> (index + shift) & 1]


@register_thermal
class PiThrottledReader(ThermalReader):
    name = "vcgencmd-throttled"

    def read(self) -> ThermalState:
        bits = parse_get_throttled(self.env.run(["vcgencmd", "get_throttled"]))
        now = conditions(bits, 0)
        state = ThermalState(throttled=bool(now), reasons=[f"now: {name}" for name in now], raw=hex(bits))
        try:
            temp = re.search(r"temp=(-?[\d.]+)", self.env.run(["vcgencmd", "measure_temp"]))
            if temp:
                state.temperatures_c["soc"] = float(temp.group(1))
        except SensorUnavailable:
            pass
        return state

    def changes(self, before: ThermalState, after: ThermalState) -> list[str]:
        if not before.raw or not after.raw:
            return []
        new = int(after.raw, 16) & ~int(before.raw, 16)
        return [f"during the run: {name}" for name in conditions(new, 16)]
