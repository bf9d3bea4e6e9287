"""The one interface every transport implements, and the registry by connection kind."""

import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from edgeprune.devices.profile import Endpoint
from edgeprune.errors import EdgepruneError
from edgeprune.registry import Registry

EXIT_DEVICE_TIMEOUT = 6


class DeviceTimeoutError(EdgepruneError):
    """A command on a device ran past its timeout and was stopped. The CLI prints one line and exits 6."""

    exit_code = EXIT_DEVICE_TIMEOUT


class CommandResult(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str


class Transport(ABC):
    """Push files into a private work folder on a device, run commands there, fetch files, clean up.

    The work folder is created on first use and removed by `close()`; use the transport as a context
    manager. Remote names are plain file names inside the work folder; commands are argument lists
    and run with the work folder as their current directory. A remote transport runs each command
    under `guarded_command`, so a timeout or Ctrl-C ends it on the device too (`stop_command`).
    """

    kind = ""

    default_python = "python3"

    def __init__(self, endpoint: Endpoint, python: str | None = None) -> None:
        self.endpoint = endpoint
        self.python = python or self.default_python
        self._workdir: str | None = None
        self._runs = 0

    def next_run_tag(self) -> str:
        """A name, unique in this work folder, for the bookkeeping files of one guarded command."""
        self._runs += 1
        return f".edgeprune-run-{self._runs}"

    @property
    def label(self) -> str:
        """How error messages name the device."""
        return self.kind

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            self._workdir = self._make_workdir()
        return self._workdir

    def remote_path(self, name: str) -> str:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"remote names are plain file names in the work folder, got {name!r}")
        return f"{self.workdir}/{name}"

    @abstractmethod
    def _make_workdir(self) -> str: ...

    @abstractmethod
    def push(self, local: Path, name: str | None = None) -> str:
        """Copy `local` into the work folder as `name` (default: its own name); return the remote path."""

    @abstractmethod
    def run(self, argv: Sequence[str], timeout_s: float = 600, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run `argv` in the work folder; `env` adds variables. Never raises for a non-zero exit."""

    @abstractmethod
    def fetch(self, name: str, local: Path) -> Path:
        """Copy `name` from the work folder to `local`; return `local`."""

    def unreachable(self, timeout_s: float = 60) -> str | None:
        """Why the device does not run a command (`true`), or None when it does: the probe before a fit."""
        from edgeprune.errors import DeviceUnreachableError

        try:
            done = self.run(["true"], timeout_s=timeout_s)
        except DeviceUnreachableError as error:
            return str(error)
        return None if done.exit_code == 0 else f"`true` exited {done.exit_code} there"

    def pin_prefix(self, threads: int) -> list[str]:
        """Words to put before a command so its threads run on the device's fastest cores (none by default)."""
        return []

    @abstractmethod
    def _remove_workdir(self, path: str) -> None: ...

    def close(self) -> None:
        if self._workdir is not None:
            path, self._workdir = self._workdir, None
            self._remove_workdir(path)

    def __enter__(self) -> "Transport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shell_command(argv: Sequence[str], cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """One POSIX shell line for a remote shell: every argument quoted, optionally in `cwd` with `env`."""
    prefix = f"cd {shlex.quote(cwd)} && " if cwd else ""
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items() if _is_name(k))
    command = " ".join(shlex.quote(a) for a in argv)
    return f"{prefix}{'env ' + assignments + ' ' if assignments else ''}{command}"


# Runs "$@" in the process group the caller made (mode `group`: `setsid` made this shell the leader of a
# new session) and writes "-PGID" to the pid file, or, without setsid, execs "$@" and writes its PID. A stop
# file written before the pid file was read means the command was stopped before it started. The leader
# outlives a TERM to the group (`trap :`, which exec does not pass on) to reap the command, so the
# group is gone, not left as an orphaned zombie, as soon as the command is.
GUARD_SCRIPT = ('p=$1 s=$2 m=$3; shift 3; t=$$; [ "$m" = group ] && t=-$$; echo "$t" > "$p" || exit 125; '
                'if [ -e "$s" ]; then rm -f "$p"; exit 143; fi; [ "$m" = group ] || exec "$@"; '
                'trap : TERM; "$@"; r=$?; rm -f "$p"; exit $r')

# Writes the stop file, then signals what the pid file names: TERM, up to 2 s to go, then KILL. `k` signals
# a group as dash and mksh (Android) want it, `kill -s SIG -- -PGID`, else as busybox ash does, without `--`.
STOP_SCRIPT = ('k() { kill -s "$1" -- "$2" 2>/dev/null || kill -s "$1" "$2" 2>/dev/null; }; '
               'cd "$1" 2>/dev/null || exit 0; : > "$2.stop"; [ -s "$2.pid" ] || exit 0; t=$(cat "$2.pid"); '
               'k TERM "$t" || exit 0; i=0; while [ $i -lt 20 ] && k 0 "$t"; do sleep 0.1 2>/dev/null || sleep 1; '
               'i=$((i + 1)); done; k KILL "$t"; exit 0')


def guarded_command(argv: Sequence[str], cwd: str, tag: str, env: Mapping[str, str] | None = None) -> str:
    """One shell line that runs `argv` in `cwd` in a process group of its own, recorded in `cwd`/`tag`.pid.

    Closing an ssh or adb client does not end what it started on the device (no pty, no SIGHUP), so a
    transport that gives up on a command runs `stop_command` with the same tag to end the whole group.
    The line's exit status is the command's.
    """
    words = [*(["env", *(f"{k}={v}" for k, v in (env or {}).items() if _is_name(k))] if env else []), *argv]
    command = " ".join(shlex.quote(w) for w in words)
    guard = f"sh -c {shlex.quote(GUARD_SCRIPT)} sh {shlex.quote(tag + '.pid')} {shlex.quote(tag + '.stop')}"
    # `(exit $?)` keeps the shell from exec'ing setsid as its last command: setsid in a session leader
    # (sshd makes the login shell one) would fork and return at once.
    return (f"cd {shlex.quote(cwd)} && if command -v setsid >/dev/null 2>&1; then setsid {guard} group {command}; "
            f"else {guard} exec {command}; fi; (exit $?)")


def stop_command(cwd: str, tag: str) -> str:
    """One shell line that ends the guarded command `tag` in `cwd` (and everything it started), or keeps it
    from starting; exits 0 whether or not anything was running."""
    return f"sh -c {shlex.quote(STOP_SCRIPT)} sh {shlex.quote(cwd)} {shlex.quote(tag)}"


def _is_name(key: str) -> bool:
    if not key.replace("_", "a").isalnum() or key[0].isdigit():
        raise ValueError(f"{key!r} is not an environment variable name")
    return True


# one registry per family of parts (edgeprune/registry.py); each transport module registers itself on import
TRANSPORTS: Registry[type[Transport]] = Registry("connection kind")


def register(kind: str) -> Callable[[type[Transport]], type[Transport]]:
    """Class decorator: the transport for connections of `kind` (profile `[connection] kind = ...`)."""
    def add(cls: type[Transport]) -> type[Transport]:
        cls.kind = kind
        return TRANSPORTS.register(kind)(cls)

    return add
