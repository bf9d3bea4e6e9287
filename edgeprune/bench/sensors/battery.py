"""Android battery power: `current_now` × `voltage_now` under /sys/class/power_supply/battery.

Units and sign vary by vendor: most report µA and µV, some mA and mV; discharge current is negative
on some phones and positive on others. Magnitudes tell the units apart (a phone draws 0.05–5 A at
3–5 V) and the absolute value is used. A charging phone (on USB) feeds the battery from outside, so
its battery current is not the phone's draw: the reader refuses to measure then.
"""

from .base import PowerSensor, SensorUnavailable, first_number, register_power

BATTERY = "/sys/class/power_supply/battery"


def to_amps(raw: float) -> float:
    """µA or mA to A, told apart by magnitude: above 20000 it cannot be mA (20 A)."""
    return abs(raw) / 1e6 if abs(raw) > 20000 else abs(raw) / 1e3


def to_volts(raw: float) -> float:
    """µV or mV to V: a battery voltage in mV is below 10000."""
    return raw / 1e6 if raw > 10000 else raw / 1e3


@register_power
class BatterySensor(PowerSensor):
    name = "battery"

    def read(self) -> float:
        status = self.env.read(f"{BATTERY}/status")
        if status in ("Charging", "Full"):
            raise SensorUnavailable(f"the battery is {status.lower()} (on USB power), so its current is not "
                                    "the phone's draw; unplug or disable charging to measure")
        amps = to_amps(first_number(self.env.read(f"{BATTERY}/current_now")))
        volts = to_volts(first_number(self.env.read(f"{BATTERY}/voltage_now")))
        return amps * volts

    def describe(self) -> str:
        return "battery current_now x voltage_now"
