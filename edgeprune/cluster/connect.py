"""Joining a Ray cluster (or starting one on this machine) for edgeprune's work, with errors a user can act on."""

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
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
ANSWER_TIMEOUT_S = 3.0  # for its first HTTP/2 frame: a GCS sends it at once (about 1 ms on loopback)
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


# HTTP/2 with prior knowledge, as gRPC speaks it on a plain port (RFC 9113 3.4): the client's preface and an empty
# SETTINGS frame (length 0, type 4, no flags, stream 0). The server's first frame must be a SETTINGS frame. Ray's
# GCS and its Ray Client server are gRPC servers; written here (not the h2 package) for the first frame only.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4
FRAME_HEADER_BYTES = 9


def check_speaks_grpc(address: str, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """Refuse, in one line (exit 5), a cluster address whose port accepts connections but does not answer as a
    gRPC server (another service, or one that never replies): Ray would wait on it without end."""
    problem = grpc_problem(address, timeout_s)
    if problem is not None:
        raise DeviceUnreachableError(f"cannot reach the Ray cluster at {address}: {problem}; name the address "
                                     "`ray start --head` printed on the head machine, or use --ray auto")


def grpc_problem(address: str, timeout_s: float = ANSWER_TIMEOUT_S) -> str | None:
    """None when the head at `address` answers as a gRPC server within `timeout_s`; else what is wrong."""
    host, port = head_endpoint(address)
    header = b""
    try:
        connection = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except OSError as error:  # refused, no route, a name that does not resolve
        return f"{error.strerror or error} ({host}:{port})"
    try:
        with connection:
            connection.settimeout(timeout_s)
            connection.sendall(HTTP2_PREFACE)
            while len(header) < FRAME_HEADER_BYTES:
                chunk = connection.recv(FRAME_HEADER_BYTES - len(header))
                if not chunk:
                    break
                header += chunk
    except TimeoutError:
        return f"{host}:{port} accepts connections but sent nothing within {timeout_s:g} s"
    except OSError as error:
        return f"{host}:{port} closed the connection ({error.strerror or error})"
    if len(header) == FRAME_HEADER_BYTES and header[3] == HTTP2_SETTINGS:
        return None
    return f"{host}:{port} answers, but not as a Ray head (it replied {header[:16]!r})"


WATCH_INTERVAL_S = 2.0  # between probes of the head while a fit runs on the cluster
LOST_AFTER_S = 8.0  # without an answer: the head is gone (Ray ends its driver itself after 60 s, in its own words)


class ClusterWatch:
    """Probe the Ray head at `address` in a background thread while work runs on the cluster; once it has not
    answered for `lost_after_s`, call `on_lost(reason)` from that thread (and stop watching). Ray does not tell its
    driver that the head went away: calls into it wait, and 60 s later its C++ core ends the process with only its
    own log line, so this is how edgeprune notices in seconds and says so in its own."""

    def __init__(self, address: str, on_lost: Callable[[str], None], interval_s: float = WATCH_INTERVAL_S,
                 lost_after_s: float = LOST_AFTER_S) -> None:
        self.address, self.on_lost = address, on_lost
        self.interval_s, self.lost_after_s = interval_s, lost_after_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.watch, name="edgeprune-ray-watch", daemon=True)

    def __enter__(self) -> "ClusterWatch":
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=self.interval_s + ANSWER_TIMEOUT_S)

    def watch(self) -> None:
        answered = time.monotonic()
        while not self.stopped.wait(self.interval_s):
            problem = grpc_problem(self.address, min(ANSWER_TIMEOUT_S, self.lost_after_s))
            if problem is None:
                answered = time.monotonic()
            elif time.monotonic() - answered >= self.lost_after_s and not self.stopped.is_set():
                self.on_lost(f"no answer for {self.lost_after_s:g} s: {problem}")
                return


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
        check_speaks_grpc(address)  # and a port that accepts but is not Ray's, on which Ray would wait for ever
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
