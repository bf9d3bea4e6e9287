"""Joining a Ray cluster (or starting one on this machine) for edgeprune's work, with errors a user can act on."""

import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from edgeprune.errors import DeviceUnreachableError, UserInputError
from edgeprune.extras import require_extra
from edgeprune.progress import VERBOSITY

LOCAL = "auto"  # --ray auto: start a Ray instance on this machine, for this run only
# Ray binds a local-only instance to 127.0.0.1 when it is told that multi-node clusters are off (its default on
# macOS and Windows): nothing of a `--ray auto` run listens beyond this machine
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
CLIENT_PREFIX = "ray://"
DEFAULT_PORTS = {"": 6379, CLIENT_PREFIX: 10001}  # a head's GCS, a Ray Client server
REACH_TIMEOUT_S = 5.0  # for the head to accept a connection: Ray itself retries for minutes
START_HINT = "start it with `ray start --head` on the head machine, or use --ray auto"


def head_endpoint(address: str) -> tuple[str, int]:
    """The host and port that `address` (HOST[:PORT], or ray://HOST[:PORT]) names."""
    prefix = CLIENT_PREFIX if address.startswith(CLIENT_PREFIX) else ""
    rest = address[len(prefix):]
    host, colon, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if not colon:
        host, port = rest, str(DEFAULT_PORTS[prefix])
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserInputError(f"--ray {address}: expected HOST:PORT of the cluster's head (as `ray start --head` "
                             "printed it), ray://HOST:PORT, or auto")
    return host, int(port)


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Refuse, in one line (exit 5), a cluster address where nothing accepts a connection within `timeout_s`:
    before Ray is asked, which would retry for minutes while its own C++ logs fill the terminal."""
    host, port = head_endpoint(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except TimeoutError:
        raise DeviceUnreachableError(f"cannot reach the Ray cluster at {address}: no answer from {host}:{port} "
                                     f"within {timeout_s:g} s; {START_HINT}") from None
    except OSError as error:  # refused, no route, a name that does not resolve
        reason = error.strerror or str(error) or type(error).__name__
        raise DeviceUnreachableError(f"cannot reach the Ray cluster at {address}: {reason} ({host}:{port}); "
                                     f"{START_HINT}") from None


@contextmanager
def ray_output_hidden() -> Iterator[None]:
    """What Ray prints while it connects (its C++ log lines, its notices) kept out of the terminal unless
    --verbose, even when the connection fails: edgeprune's own line says what went wrong."""
    if VERBOSITY.verbose:
        yield
        return
    from wurlitzer import pipes

    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as sink:
        with pipes(stdout=sink, stderr=sink):
            yield


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
    else:
        check_reachable(address)  # in seconds, before Ray's minutes of retries
    import ray

    if ray.is_initialized():
        return False
    try:
        with ray_output_hidden():
            if address == LOCAL:
                ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as error:
        message = " ".join(str(error).split())
        raise DeviceUnreachableError(f"cannot reach the Ray cluster at {address}: {message}; {START_HINT}") from None
    return True
