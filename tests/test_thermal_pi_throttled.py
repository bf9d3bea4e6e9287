"""Raspberry Pi `vcgencmd get_throttled`: present conditions, and conditions that came and went in a run."""

import pytest

from edgeprune.bench.sensors import SensorUnavailable, ThermalState
from edgeprune.bench.sensors.pi_throttled import PiThrottledReader, conditions, parse_get_throttled
from tests._device_fixtures import command_output


def test_bit_fields_of_captured_outputs():
    assert parse_get_throttled(command_output("pi5", "get_throttled_idle.txt")) == 0
    bits = parse_get_throttled(command_output("pi5", "get_throttled_undervoltage.txt"))
    assert bits == 0x50005
    assert conditions(bits, 0) == ["under-voltage", "throttled"]
    assert conditions(bits, 16) == ["under-voltage", "throttled"]
    assert conditions(parse_get_throttled(command_output("pi5", "get_throttled_capped_since_boot.txt")), 16) \
        == ["arm frequency capped"]


def test_a_condition_set_since_boot_during_the_run_is_reported():
    reader = PiThrottledReader()
    before = ThermalState(raw=hex(0x0))
    after = ThermalState(raw=hex(0x40000))  # throttled at some point, cleared by the end
    assert reader.changes(before, after) == ["during the run: throttled"]
    assert reader.changes(after, after) == []  # already set before the run: not this run's doing


def test_unexpected_output_is_unavailable():
    with pytest.raises(SensorUnavailable, match="unexpected"):
        parse_get_throttled("VCHI initialization failed")
