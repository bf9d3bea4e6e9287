"""Linux thermal zones: /sys/class/thermal/thermal_zone*/temp in millidegrees Celsius.

A zone at or above one of its `passive` trip points is being cooled by lowering clocks, so the
reader reports it as throttled. Works on Pi, Jetson and most Linux boards (and Android, unrooted,
where readable).
"""

from .base import SensorUnavailable, ThermalReader, ThermalState, first_number, register_thermal

THERMAL = "/sys/class/thermal"


@register_thermal
class ThermalZonesReader(ThermalReader):
    name = "thermal-zones"

    def read(self) -> ThermalState:
        zones = self.env.glob(f"{THERMAL}/thermal_zone*")
        if not zones:
            raise SensorUnavailable(f"no thermal zones under {THERMAL}")
        state = ThermalState()
        for zone in zones:
            try:
                celsius = first_number(self.env.read(f"{zone}/temp")) / 1000
            except SensorUnavailable:
                continue  # some zones refuse reads while their sensor is off
            try:
                name = self.env.read(f"{zone}/type")
            except SensorUnavailable:
                name = zone.rsplit("/", 1)[-1]
            key = name if name not in state.temperatures_c else f"{name}.{zone.rsplit('zone', 1)[-1]}"
            state.temperatures_c[key] = celsius
            for trip_type in self.env.glob(f"{zone}/trip_point_*_type"):
                if self.env.read(trip_type) != "passive":
                    continue
                limit = first_number(self.env.read(trip_type.replace("_type", "_temp"))) / 1000
                if celsius >= limit:
                    state.throttled = True
                    state.reasons.append(f"{key} at {celsius:.1f} °C is at or above its passive trip {limit:.1f} °C")
        if not state.temperatures_c:
            raise SensorUnavailable(f"no readable thermal zone under {THERMAL}")
        return state
