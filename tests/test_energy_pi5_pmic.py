"""Raspberry Pi 5 PMIC rails from `vcgencmd pmic_read_adc`."""

import shutil

import pytest

from edgeprune.bench.sensors import SensorUnavailable, power_sensor
from edgeprune.bench.sensors.pi5_pmic import parse_pmic_read_adc
from tests._device_fixtures import command_output


def test_rails_pair_current_with_voltage_by_name():
    rails = parse_pmic_read_adc(command_output("pi5", "pmic_read_adc.txt"))
    assert len(rails) == 12 and "EXT5V" not in rails and "BATT" not in rails  # inputs without a current
    assert rails["VDD_CORE"] == pytest.approx(2.15470000 * 0.86173300)
    assert rails["3V3_SYS"] == pytest.approx(0.05562000 * 3.31232400)
    assert rails["DDR_VDDQ"] == 0.0
    expected = (0 * 3.712816 + 0.05562 * 3.312324 + 0.17076 * 1.800726 + 0.02732 * 1.113552 + 0 * 0.6043956
                + 0.17564 * 1.10647 + 0.31225 * 0.8026368 + 2.1547 * 0.861733 + 0.0004884 * 3.31379
                + 0.0003053 * 3.31379 + 0.003606 * 0.79824 + 0.01513 * 5.16)
    assert sum(rails.values()) == pytest.approx(expected)


def test_output_without_rails_is_unavailable():
    with pytest.raises(SensorUnavailable, match="no rail with both current and voltage"):
        parse_pmic_read_adc("EXT5V_V volt(24)=5.12064000V\n")


@pytest.mark.skipif(shutil.which("vcgencmd") is not None, reason="this machine is a Raspberry Pi")
def test_without_vcgencmd_the_sensor_says_so():
    with pytest.raises(SensorUnavailable, match="vcgencmd is not installed"):
        power_sensor("vcgencmd").read()
