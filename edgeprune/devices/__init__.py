"""Device profiles and the transports that reach devices."""

from edgeprune.devices.probe import DeviceReport, probe_device
from edgeprune.devices.profile import DeviceProfile, known_devices, load_profile, profile_dirs
from edgeprune.devices.transports import Endpoint

__all__ = ["DeviceProfile", "DeviceReport", "Endpoint", "known_devices", "load_profile", "probe_device", "profile_dirs"]
