"""Linux RAPL energy counters (Intel, and AMD since Linux 5.8) under /sys/class/powercap.

Each package domain `intel-rapl:N` has `energy_uj`, a counter in microjoules that wraps to zero after
`max_energy_range_uj`. Sub-domains (`intel-rapl:N:M`, core/uncore/dram) are parts of their package and
are not added again. Since Linux 5.10 `energy_uj` is readable by root only (a side-channel fix), and
containers usually do not expose powercap at all: both are reported as unavailable, not as zero.
"""

import re

from .base import PowerSensor, SensorUnavailable, first_number, register_power

POWERCAP = "/sys/class/powercap"


@register_power
class RaplSensor(PowerSensor):
    name = "rapl"
    counter = True

    def domains(self) -> list[str]:
        found = [p for p in self.env.glob(f"{POWERCAP}/intel-rapl:*") if re.search(r"intel-rapl:\d+$", p)]
        if not found:
            raise SensorUnavailable(f"no RAPL package domains under {POWERCAP} (not an x86 board, or the "
                                    "container does not expose powercap)")
        return found

    def read(self) -> dict[str, int]:
        return {domain: int(first_number(self.env.read(f"{domain}/energy_uj"), int)) for domain in self.domains()}

    def joules_between(self, before: dict[str, int], after: dict[str, int]) -> float:
        total_uj = 0
        for domain, start in before.items():
            end = after[domain]
            if end < start:  # the counter wrapped once (at least 60 s at full power on common parts)
                end += int(first_number(self.env.read(f"{domain}/max_energy_range_uj"), int)) + 1
            total_uj += end - start
        return total_uj / 1e6

    def describe(self) -> str:
        names = []
        for domain in self.domains():
            try:
                names.append(self.env.read(f"{domain}/name"))
            except SensorUnavailable:
                names.append(domain.rsplit("/", 1)[-1])
        return f"rapl ({' + '.join(names)})"
