"""Jetson INA3221 through hwmon: the VDD_IN channel, mV × mA, or µW where the kernel gives power."""

import shutil

import pytest

from edgeprune.bench.sensors import Environment, SensorUnavailable, power_sensor
from tests._device_fixtures import FIXTURES

HWMON = "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"


def test_module_input_power_from_the_fixture_tree():
    sensor = power_sensor("ina3221", Environment(str(FIXTURES / "jetson-orin-nano")))
    assert sensor.read() == pytest.approx(5056 * 984 / 1e6)
    assert sensor.describe() == "ina3221 VDD_IN (hwmon channel 1)"


@pytest.fixture
def tree(tmp_path):
    shutil.copytree(FIXTURES / "jetson-orin-nano", tmp_path / "jetson")
    return tmp_path / "jetson"


def test_the_channel_is_chosen_by_label(tree):
    hwmon = tree / HWMON
    (hwmon / "in1_label").write_text("VDD_SOC\n")
    (hwmon / "in3_label").write_text("VDD_IN\n")
    sensor = power_sensor("ina3221", Environment(str(tree)))
    assert sensor.read() == pytest.approx(5056 * 293 / 1e6) and "channel 3" in sensor.describe()


def test_a_power_file_in_microwatts_is_preferred(tree):
    (tree / HWMON / "power1_input").write_text("4981000\n")
    assert power_sensor("ina3221", Environment(str(tree))).read() == pytest.approx(4.981)


def test_no_ina3221_is_unavailable(tmp_path):
    with pytest.raises(SensorUnavailable, match="no INA3221 hwmon"):
        power_sensor("ina3221", Environment(str(tmp_path))).read()
