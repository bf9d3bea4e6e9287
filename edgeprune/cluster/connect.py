"""Joining a Ray cluster (or starting one on this machine) for edgeprune's work, with errors a user can act on."""

import os

from edgeprune.errors import DeviceUnreachableError, UserInputError
from edgeprune.extras import require_extra

LOCAL = "auto"  # --ray auto: start a Ray instance on this machine, for this run only
# Ray binds a local-only instance to 127.0.0.1 when it is told that multi-node clusters are off (its default on
# macOS and Windows): nothing of a `--ray auto` run listens beyond this machine
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def connect_ray(address: str | None) -> bool:
    """Connect this process to the Ray cluster at `address` (host:port of its head, `ray://...` for Ray Client,
    or "auto" to start one here); None takes RAY_ADDRESS. Returns whether this call connected (and so should
    `ray.shutdown()` when done): False when this process was connected already."""
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise UserInputError("name the Ray cluster: --ray HOST:PORT (its head, as `ray start --head` printed), "
                             "--ray auto to start one on this machine, or set RAY_ADDRESS")
    require_extra("cluster", "running on Ray")
    if address == LOCAL:
        for name, value in LOOPBACK_ONLY.items():
            os.environ.setdefault(name, value)  # before ray is imported: it reads this once
    import ray

    if ray.is_initialized():
        return False
    try:
        if address == LOCAL:
            ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as error:
        raise DeviceUnreachableError(f"cannot join the Ray cluster at {address}: {error}; start it with "
                                     "`ray start --head` on the head machine, or use --ray auto") from None
    return True
