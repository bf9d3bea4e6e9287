"""RAPL energy counters: package domains only, wrap-around, and a clean 'not readable' on this host."""

import shutil

import pytest

from edgeprune.bench.sensors import Environment, SensorUnavailable, power_sensor
from tests._device_fixtures import FIXTURES

POWERCAP = "sys/class/powercap"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "x86_64"
    shutil.copytree(FIXTURES / "x86_64", root)
    return root


def write_counter(root, domain, microjoules):
    (root / POWERCAP / domain / "energy_uj").write_text(f"{microjoules}\n")


def test_reads_package_domains_and_not_their_sub_domains(tree):
    sensor = power_sensor("rapl", Environment(str(tree)))
    assert sensor.counter
    assert sensor.read() == {"/sys/class/powercap/intel-rapl:0": 262143000000,
                             "/sys/class/powercap/intel-rapl:1": 5000000}
    assert sensor.describe() == "rapl (package-0 + package-1)"


def test_energy_between_two_readings_handles_a_wrapped_counter(tree):
    sensor = power_sensor("rapl", Environment(str(tree)))
    before = sensor.read()
    # package-0 passes max_energy_range_uj (262143328850) and restarts; package-1 simply grows
    write_counter(tree, "intel-rapl:0", 171150)
    write_counter(tree, "intel-rapl:1", 7500000)
    after = sensor.read()
    wrapped_uj = (262143328850 + 1 - 262143000000) + 171150
    assert sensor.joules_between(before, after) == pytest.approx((wrapped_uj + 2500000) / 1e6)
    assert sensor.joules_between(before, before) == 0


def test_missing_powercap_is_unavailable_with_the_reason(tmp_path):
    with pytest.raises(SensorUnavailable, match="no RAPL package domains under /sys/class/powercap"):
        power_sensor("rapl", Environment(str(tmp_path))).read()


def test_an_unreadable_counter_is_unavailable_not_zero(tree):
    (tree / POWERCAP / "intel-rapl:1" / "energy_uj").unlink()
    with pytest.raises(SensorUnavailable, match="intel-rapl:1/energy_uj does not exist"):
        power_sensor("rapl", Environment(str(tree))).read()


def test_this_host_either_reads_rapl_or_says_why_not():
    sensor = power_sensor("rapl")
    try:
        readings = sensor.read()
    except SensorUnavailable as error:  # in a container, or energy_uj is root-only (Linux >= 5.10)
        assert "powercap" in str(error) or "permission denied" in str(error)
    else:
        assert readings and all(isinstance(value, int) and value >= 0 for value in readings.values())


def test_unknown_sensor_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown power sensor 'ammeter'; known: battery, ina3221, rapl"):
        power_sensor("ammeter")
