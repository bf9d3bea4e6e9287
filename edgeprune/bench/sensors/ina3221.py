"""Jetson INA3221 power monitor through hwmon: `inN_input` (mV) and `currN_input` (mA) per channel.

On Orin boards channel 1 (`in1_label` = VDD_IN) is the module input; it is the rail this reader uses,
chosen by label when labels exist. Some kernels expose `powerN_input` (µW) directly; it is preferred.
"""

from .base import PowerSensor, SensorUnavailable, first_number, register_power

HWMON = "/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
INPUT_RAIL = "VDD_IN"


@register_power
class Ina3221Sensor(PowerSensor):
    name = "ina3221"

    def channel(self) -> tuple[str, int, str]:
        """(hwmon folder, channel number, label) of the module input."""
        folders = self.env.glob(HWMON)
        if not folders:
            raise SensorUnavailable(f"no INA3221 hwmon under {HWMON.rsplit('/*/hwmon', 1)[0]}")
        for folder in folders:
            for label_path in self.env.glob(f"{folder}/in*_label"):
                label = self.env.read(label_path)
                if label == INPUT_RAIL:
                    return folder, int(label_path.rsplit("/in", 1)[1].split("_")[0]), label
        return folders[0], 1, "channel 1"

    def read(self) -> float:
        folder, channel, _ = self.channel()
        try:
            return first_number(self.env.read(f"{folder}/power{channel}_input")) / 1e6
        except SensorUnavailable:
            millivolts = first_number(self.env.read(f"{folder}/in{channel}_input"))
            milliamps = first_number(self.env.read(f"{folder}/curr{channel}_input"))
            return millivolts * milliamps / 1e6

    def describe(self) -> str:
        _, channel, label = self.channel()
        return f"ina3221 {label} (hwmon channel {channel})"
