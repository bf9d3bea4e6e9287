"""Device profiles and the transports that reach devices."""

from edgeprune.devices.profile import DeviceProfile, Endpoint, known_devices, load_profile, profile_dirs

__all__ = ["DeviceProfile", "Endpoint", "known_devices", "load_profile", "profile_dirs"]
