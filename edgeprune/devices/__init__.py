"""Device profiles and the transports that reach devices."""

from edgeprune.devices.probe import DeviceReport, probe_device
from edgeprune.devices.profile import DeviceProfile, Endpoint, known_devices, load_profile, profile_dirs

__all__ = ["DeviceProfile", "DeviceReport", "Endpoint", "known_devices", "load_profile", "probe_device", "profile_dirs"]
