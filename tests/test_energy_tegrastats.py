"""Jetson `tegrastats` lines: the module input rail and temperatures, in both line formats."""

import pytest

from edgeprune.bench.sensors import SensorUnavailable
from edgeprune.bench.sensors.tegrastats import input_power_w, parse_tegrastats_line
from tests._device_fixtures import command_output


def test_jetpack6_lines_give_vdd_in_and_temperatures():
    idle, loaded = command_output("jetson-orin-nano", "tegrastats_jetpack6.txt").splitlines()
    rails, temperatures = parse_tegrastats_line(loaded)
    assert rails == {"VDD_IN": 9.012, "VDD_CPU_GPU_CV": 4.213, "VDD_SOC": 1.830}  # instant, not the average
    assert temperatures["CPU"] == 51.25 and temperatures["tj"] == 51.25 and len(temperatures) == 9
    assert input_power_w(idle) == 4.977


def test_jetpack4_lines_use_pom_rails_without_units():
    line = command_output("jetson-orin-nano", "tegrastats_jetpack4.txt")
    rails, temperatures = parse_tegrastats_line(line)
    assert rails == {"POM_5V_IN": 3.023, "POM_5V_GPU": 0.0, "POM_5V_CPU": 0.391}
    assert temperatures["CPU"] == 33.5 and temperatures["PMIC"] == 100.0
    assert input_power_w(line) == 3.023


def test_a_line_without_an_input_rail_is_unavailable():
    with pytest.raises(SensorUnavailable, match="no VDD_IN or POM_5V_IN rail"):
        input_power_w("RAM 1517/3956MB CPU [8%@1479] CPU@33.5C")
