"""Energy and thermal readers that run on the device, inside the benchmark runner.

Standard library only and no edgeprune imports (relative imports within this package only): the host
zips this folder as the package `edgeprune_sensors` and pushes it next to the runner. One module per
reader; importing the package registers them all in POWER_SENSORS and THERMAL_READERS.
"""

from . import (  # noqa: F401 - each module registers its reader
    android_thermal,
    battery,
    ina3221,
    meter,
    pi5_pmic,
    pi_throttled,
    rapl,
    tegrastats,
    thermal_zones,
)
from .base import (
    POWER_SENSORS,
    THERMAL_READERS,
    Environment,
    PowerSensor,
    SensorUnavailable,
    ThermalReader,
    ThermalState,
    power_sensor,
)

__all__ = ["POWER_SENSORS", "THERMAL_READERS", "Environment", "PowerSensor", "SensorUnavailable", "ThermalReader",
           "ThermalState", "power_sensor"]
