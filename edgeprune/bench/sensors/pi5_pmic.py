"""Raspberry Pi 5 PMIC rails from `vcgencmd pmic_read_adc`: current and voltage per rail.

Lines look like `VDD_CORE_A current(7)=6.22421000A` and `VDD_CORE_V volt(15)=0.86173300V`; a rail's
power is its `_A` current times its `_V` voltage, paired by name. Unpaired voltages (EXT5V_V, BATT_V)
are inputs, not rails. The sum covers the PMIC's outputs, so it omits conversion losses and the USB
and fan loads: it is lower than wall power.
"""

import re

from .base import PowerSensor, SensorUnavailable, register_power

LINE = re.compile(r"^\s*(?P<rail>\S+)_(?P<kind>[AV])\s+(?:current|volt)\(\d+\)=(?P<value>[-+0-9.eE]+)[AV]\s*$")


def parse_pmic_read_adc(text: str) -> dict[str, float]:
    """Watts per rail from the command's output."""
    currents: dict[str, float] = {}
    volts: dict[str, float] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            (currents if match["kind"] == "A" else volts)[match["rail"]] = float(match["value"])
    rails = {rail: currents[rail] * volts[rail] for rail in currents if rail in volts}
    if not rails:
        raise SensorUnavailable(f"no rail with both current and voltage in `vcgencmd pmic_read_adc`: {text[:80]!r}")
    return rails


@register_power
class Pi5PmicSensor(PowerSensor):
    name = "vcgencmd"
    sample_interval_s = 0.2  # each sample is a vcgencmd process

    def read(self) -> float:
        return sum(parse_pmic_read_adc(self.env.run(["vcgencmd", "pmic_read_adc"])).values())

    def describe(self) -> str:
        return "vcgencmd pmic_read_adc (sum of PMIC rails)"
