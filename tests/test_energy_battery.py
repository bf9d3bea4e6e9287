"""Android battery power, current_now × voltage_now, with vendor units and sign, refusing while charging."""

import shutil

import pytest

from edgeprune.bench.sensors import Environment, SensorUnavailable, power_sensor
from edgeprune.bench.sensors.battery import to_amps, to_volts
from tests._device_fixtures import FIXTURES

BATTERY = "sys/class/power_supply/battery"


@pytest.fixture
def phone(tmp_path):
    shutil.copytree(FIXTURES / "android-arm64", tmp_path / "phone")
    return tmp_path / "phone"


def test_microamps_times_microvolts_with_a_negative_discharge_current():
    sensor = power_sensor("battery", Environment(str(FIXTURES / "android-arm64")))
    assert sensor.read() == pytest.approx(0.412 * 3.987)


def test_milliamp_and_millivolt_vendors(phone):
    (phone / BATTERY / "current_now").write_text("650\n")
    (phone / BATTERY / "voltage_now").write_text("4012\n")
    assert power_sensor("battery", Environment(str(phone))).read() == pytest.approx(0.650 * 4.012)
    assert to_amps(-412000) == to_amps(412000) == 0.412 and to_volts(3987000) == to_volts(3987) == 3.987


@pytest.mark.parametrize("status", ["Charging", "Full"])
def test_a_phone_on_usb_power_is_not_measured(phone, status):
    (phone / BATTERY / "status").write_text(f"{status}\n")
    with pytest.raises(SensorUnavailable, match=f"the battery is {status.lower()} .*unplug"):
        power_sensor("battery", Environment(str(phone))).read()
