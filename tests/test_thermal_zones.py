"""Linux thermal zones: temperatures by zone type, throttled at or above a passive trip point."""

import shutil

import pytest

from edgeprune.bench.sensors import THERMAL_READERS, Environment, SensorUnavailable
from edgeprune.bench.sensors.meter import readable_thermal_readers, thermal_report
from tests._device_fixtures import FIXTURES


def reader(root):
    return THERMAL_READERS["thermal-zones"](Environment(str(root)))


def test_a_pi_below_its_passive_trip_is_not_throttled():
    state = reader(FIXTURES / "pi5").read()
    assert state.temperatures_c == {"cpu-thermal": 61.25} and not state.throttled  # the 50 °C trip is a fan


def test_a_jetson_zone_past_its_passive_trip_is_throttled():
    state = reader(FIXTURES / "jetson-orin-nano").read()
    assert state.temperatures_c == {"cpu-thermal": 98.5, "gpu-thermal": 47.062}
    assert state.throttled and state.reasons == ["cpu-thermal at 98.5 °C is at or above its passive trip 95.5 °C"]


def test_no_zones_is_unavailable(tmp_path):
    with pytest.raises(SensorUnavailable, match="no thermal zones"):
        reader(tmp_path).read()


def test_the_report_compares_before_and_after(tmp_path):
    shutil.copytree(FIXTURES / "pi5", tmp_path / "pi5")
    env = Environment(str(tmp_path / "pi5"))
    readers = readable_thermal_readers(env)
    assert list(readers) == ["thermal-zones"]  # vcgencmd and dumpsys are not on this machine
    (tmp_path / "pi5/sys/class/thermal/thermal_zone0/temp").write_text("86100\n")  # heated past 85 °C
    report = thermal_report(readers)
    assert report["thermal_before_c"] == {"thermal-zones:cpu-thermal": 61.25}
    assert report["thermal_after_c"] == {"thermal-zones:cpu-thermal": 86.1}
    assert report["throttled"] and "after: cpu-thermal at 86.1 °C" in report["throttle_reasons"][0]
