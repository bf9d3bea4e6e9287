"""Android `dumpsys thermalservice`: the platform's thermal status and the HAL's current temperatures."""

import pytest

from edgeprune.bench.sensors import SensorUnavailable
from edgeprune.bench.sensors.android_thermal import parse_thermalservice
from tests._device_fixtures import command_output


def test_status_none_is_not_throttled_and_uses_current_hal_readings():
    state = parse_thermalservice(command_output("android-arm64", "dumpsys_thermalservice_none.txt"))
    assert not state.throttled and state.raw == "0"
    # the HAL's current readings, not the cached ones above them (battery 29.0, skin 30.1)
    assert state.temperatures_c == {"BIG": 41.2, "MID": 38.7, "LITTLE": 35.9, "battery": 31.5, "skin": 33.0}


def test_status_moderate_is_throttled():
    state = parse_thermalservice(command_output("android-arm64", "dumpsys_thermalservice_moderate.txt"))
    assert state.throttled and state.reasons == ["Android thermal status 2 (moderate)"]
    assert state.temperatures_c["BIG"] == 78.4


def test_output_without_a_status_is_unavailable():
    with pytest.raises(SensorUnavailable, match="no `Thermal Status:`"):
        parse_thermalservice("Can't find service: thermalservice\n")
