"""Device profiles (and, later, transports to reach devices)."""

from edgeprune.devices.profile import DeviceProfile, known_devices, load_profile, profile_dirs

__all__ = ["DeviceProfile", "known_devices", "load_profile", "profile_dirs"]
