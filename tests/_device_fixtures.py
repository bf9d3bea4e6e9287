"""Where the device fixtures live (tests/fixtures/devices; see its README for their provenance), and how the
transport tests see what a remote command left running on the loopback "device", which is this machine."""

import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "devices"

# A parent that starts a child (both with the marker in their argv), writes both PIDs to a file, and sleeps
SLEEPER = """import pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", sys.argv[1]])
pathlib.Path(sys.argv[2]).write_text(f"{child.pid} {__import__('os').getpid()}")
time.sleep(60)
"""


def command_output(device: str, name: str) -> str:
    return (FIXTURES / device / "commands" / name).read_text()


def unique_marker() -> str:
    return f"edgeprune-test-{uuid.uuid4().hex}"


def sleeper(marker: str, pids_file: Path) -> list[str]:
    """argv of a remote command that runs for a minute in two processes named by `marker`."""
    return [sys.executable, "-c", SLEEPER, marker, str(pids_file)]


def running_with(marker: str) -> list[int]:
    """PIDs of live processes on this machine with `marker` in their command line (zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10) -> bool:
    """Poll `predicate()` until it is true or `timeout_s` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()
