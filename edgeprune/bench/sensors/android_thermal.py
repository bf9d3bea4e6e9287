"""Android thermal status from `dumpsys thermalservice`.

`Thermal Status: N` is the platform's throttling level (0 none, 1 light, 2 moderate, 3 severe,
4 critical, 5 emergency, 6 shutdown); from 1 on the system is limiting performance. Temperatures come
from the HAL as `Temperature{mValue=35.8, mType=0, mName=BIG, mStatus=0}` lines.
"""

import re

from .base import SensorUnavailable, ThermalReader, ThermalState, register_thermal

LEVELS = ("none", "light", "moderate", "severe", "critical", "emergency", "shutdown")
TEMPERATURE = re.compile(r"Temperature\{mValue=(?P<value>-?[\d.]+(?:[eE][-+]?\d+)?), mType=-?\d+, "
                         r"mName=(?P<name>[^,]+), mStatus=(?P<status>\d+)\}")


def parse_thermalservice(text: str) -> ThermalState:
    match = re.search(r"^\s*Thermal Status:\s*(\d+)", text, re.MULTILINE)
    if match is None:
        raise SensorUnavailable("no `Thermal Status:` in `dumpsys thermalservice` output")
    level = int(match.group(1))
    # the HAL's current readings, not the cached ones printed above them
    section = text.split("Current temperatures from HAL:", 1)
    readings = section[1] if len(section) == 2 else text
    readings = readings.split("Current cooling devices from HAL:", 1)[0]
    state = ThermalState(raw=str(level))
    for found in TEMPERATURE.finditer(readings):
        state.temperatures_c[found["name"]] = float(found["value"])
    if level >= 1:
        name = LEVELS[level] if level < len(LEVELS) else str(level)
        state.throttled = True
        state.reasons.append(f"Android thermal status {level} ({name})")
    return state


@register_thermal
class AndroidThermalReader(ThermalReader):
    name = "thermalservice"

    def read(self) -> ThermalState:
        return parse_thermalservice(self.env.run(["dumpsys", "thermalservice"]))
