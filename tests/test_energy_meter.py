"""Energy over a block of work minus idle: the arithmetic, and the meter on live fixture files."""

import shutil
import threading
import time

import pytest

from edgeprune.bench.sensors import Environment, power_sensor
from edgeprune.bench.sensors.meter import EnergyMeter, millijoules_per_run, trapezoid_joules
from tests._device_fixtures import FIXTURES


def test_trapezoid_and_energy_above_idle():
    assert trapezoid_joules([(0.0, 2.0), (1.0, 4.0), (3.0, 4.0)]) == pytest.approx(3.0 + 8.0)
    assert trapezoid_joules([(5.0, 3.0)]) == 0.0
    # 11 J over 3 s with 2 W idle, 10 runs: (11 - 6) / 10 J = 500 mJ
    assert millijoules_per_run(11.0, 3.0, 2.0, 10) == pytest.approx(500.0)


def test_a_counter_sensor_is_read_at_both_ends(tmp_path):
    shutil.copytree(FIXTURES / "x86_64", tmp_path / "x86")
    counter = tmp_path / "x86/sys/class/powercap/intel-rapl:1/energy_uj"
    with EnergyMeter(power_sensor("rapl", Environment(str(tmp_path / "x86")))) as meter:
        counter.write_text("8250000\n")  # +3.25 J on package-1 while the block runs
    assert meter.joules == pytest.approx(3.25) and meter.seconds > 0


def test_a_power_meter_is_sampled_while_the_block_runs(tmp_path):
    shutil.copytree(FIXTURES / "android-arm64", tmp_path / "phone")
    current = tmp_path / "phone/sys/class/power_supply/battery/current_now"
    current.write_text("500000\n")  # 0.5 A x 3.987 V
    sensor = power_sensor("battery", Environment(str(tmp_path / "phone")))
    # the load triples; written whole (a new file renamed over it), as sysfs serves a value: a truncated file read
    # between the truncation and the write was an empty reading
    fresh = tmp_path / "current_now.new"
    switch = threading.Timer(0.3, lambda: (fresh.write_text("1500000\n"), fresh.replace(current)))
    with EnergyMeter(sensor) as meter:
        switch.start()
        time.sleep(0.6)
    switch.join()
    assert len(meter.samples) >= 6
    low, high = 0.5 * 3.987, 1.5 * 3.987
    assert low < meter.watts < high
    assert meter.joules == pytest.approx(low * 0.3 + high * 0.3, rel=0.2)
