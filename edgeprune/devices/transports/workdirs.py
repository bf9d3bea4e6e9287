"""Work folders left by killed processes, on this machine and on devices.

A transport's work folder records the process that made it (`OWNER_FILE`: "PID HOSTNAME" of the edgeprune process
on the machine that drives the device). A process killed with SIGKILL (the OOM killer, a CI timeout) cannot remove
its folders, so each transport, when it makes a folder, first removes the folders whose owner ran on this host and
no longer runs: leftovers do not pile up in /tmp here, nor on a board or phone. A folder made from another host
(another machine driving the same board, or a container with its own pids) is left alone, as is one without an
owner file (an older edgeprune, or one still being made) and any whose pid runs: a pid reused by another process
errs towards keeping.
"""

import os
import re
import shlex
import socket

OWNER_FILE = ".edgeprune-owner"
REMOTE_PREFIX = "edgeprune."  # remote work folders: ROOT/edgeprune.XXXXXX (mktemp)


def owner_record() -> str:
    """What a work folder made by this process records: "PID HOSTNAME"."""
    return f"{os.getpid()} {socket.gethostname()}"


def process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True


def orphaned(record: str) -> bool:
    """Whether a folder with this owner record was made here by a process that has ended."""
    pid_text, _, host = record.strip().partition(" ")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    return host == socket.gethostname() and pid != os.getpid() and not process_runs(pid)


def make_remote_workdir_line(root: str) -> str:
    """One POSIX shell line (dash, mksh, busybox ash) for a device: prints `owner DIR RECORD` for each earlier
    work folder under `root` that has an owner file, then makes a new folder owned by this process and prints
    `made DIR`. `root` is a shell word (it may name a variable, e.g. "${TMPDIR:-/tmp}")."""
    record = shlex.quote(owner_record())
    return (f'for d in {root}/{REMOTE_PREFIX}*; do [ -f "$d/{OWNER_FILE}" ] && '
            f'printf "owner %s %s\\n" "$d" "$(cat "$d/{OWNER_FILE}")"; done; '
            f'd=$(mktemp -d {root}/{REMOTE_PREFIX}XXXXXX) && echo {record} > "$d/{OWNER_FILE}" && '
            f'printf "made %s\\n" "$d"')


OWNER_LINE = re.compile(r"^owner (?P<folder>/\S+) (?P<record>\d+ \S+)$")


def parse_made(output: str) -> tuple[str | None, list[str]]:
    """From what `make_remote_workdir_line` printed: the new folder (None if it was not made) and the earlier
    folders whose owners have ended here."""
    made, orphans = None, []
    for line in output.splitlines():
        if line.startswith("made /"):
            made = line[len("made "):].strip()
        elif (match := OWNER_LINE.match(line.strip())) and orphaned(match["record"]):
            orphans.append(match["folder"])
    return made, orphans


def remove_folders_line(folders: list[str]) -> str:
    return "rm -rf " + " ".join(shlex.quote(folder) for folder in folders)  # absolute paths: no "--" needed
