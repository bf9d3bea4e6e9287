"""The one interface every transport implements, the endpoint each kind of connection is described by, and the
registry by connection kind.

A transport is a descriptor that owns everything about its kind of connection: its `Endpoint` subclass (whose
fields are the profile's [connection] keys for that kind: types, defaults and bounds are the table's schema), the
command-line flags that override a profile's connection (`Flag`, applied by `with_flags`), and pushing, running and
fetching. A new kind is one module that registers its transport (see edgeprune.plugins) plus its test.
"""

import dataclasses
import shlex
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from edgeprune.devices.schema import MAX_NUMBER, NUMBER, Key
from edgeprune.errors import EdgepruneError, UserInputError
from edgeprune.plugins import TRANSPORTS_GROUP
from edgeprune.registry import Registry
from edgeprune.serialization import json_codec

MAX_PORT = 65535

EXIT_DEVICE_TIMEOUT = 6


class DeviceTimeoutError(EdgepruneError):
    """A command on a device ran past its timeout and was stopped. The CLI prints one line and exits 6."""

    exit_code = EXIT_DEVICE_TIMEOUT


def bounds(positive: bool = False, maximum: float = MAX_NUMBER, path: bool = False) -> dict[str, Any]:
    """An endpoint field's metadata: a number's range, or a local path (`~` is expanded when a profile is read)."""
    return {"positive": positive, "maximum": maximum, "path": path}


@json_codec
@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """How to reach a device, as a profile's [connection] table says. Each transport module subclasses it with the
    keys its kind takes as fields, and sets `kind` to its kind (the field a table and the JSON form start from)."""

    kind: str = field(default="", init=False)

    @property
    def on_this_machine(self) -> bool:
        """Whether commands run on the machine edgeprune runs on (no device to reach, nothing to set up)."""
        return False

    @property
    def record_key(self) -> str:
        """What names this device in the records `devices setup` keeps (the environment it made there)."""
        return f"{self.kind}:"

    def check(self, where: str) -> None:
        """Refuse settings the type checks let through (a host ssh would read as an option, ...); `where` starts the
        message ("pi5.toml: connection", "--ssh 'pi@x'")."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Endpoint":
        """The endpoint its kind's transport describes, from `to_dict()` (or a profile's checked table)."""
        settings = {k: v for k, v in data.items() if k != "kind"}
        return TRANSPORTS.get(data.get("kind", "local")).endpoint_type(**settings)


def endpoint_schema(endpoint_type: type[Endpoint]) -> dict[str, Key]:
    """The [connection] keys an endpoint type takes, checked like every profile key: its fields' types (a float
    field takes any number), whether they have a default, and their `bounds`."""
    hints = typing.get_type_hints(endpoint_type)
    schema = {}
    for item in dataclasses.fields(endpoint_type):
        if item.name == "kind":
            continue
        options = [a for a in typing.get_args(hints[item.name]) if a is not type(None)] or [hints[item.name]]
        required = item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING
        schema[item.name] = Key(NUMBER if options[0] is float else options[0], required,
                                positive=item.metadata.get("positive", False),
                                maximum=item.metadata.get("maximum", MAX_NUMBER))
    return schema


def endpoint_from_settings(kind: str, settings: dict[str, Any], where: str) -> Endpoint:
    """The endpoint of a checked [connection] table's settings: paths expanded, numbers as their fields' types,
    then the kind's own checks."""
    endpoint_type = TRANSPORTS.get(kind).endpoint_type
    hints = typing.get_type_hints(endpoint_type)
    options = {}
    for item in dataclasses.fields(endpoint_type):
        if item.init and item.name in settings:
            value = settings[item.name]
            if item.metadata.get("path"):
                value = str(Path(value).expanduser())
            elif float in typing.get_args(hints[item.name]) or hints[item.name] is float:
                value = float(value)
            options[item.name] = value
    endpoint = endpoint_type(**options)
    endpoint.check(where)
    return endpoint


@dataclass(frozen=True)
class Flag:
    """A command-line option that overrides part of a profile's connection (`bench`, `fit`, `devices check/setup`).

    A `selects` flag switches the device to this kind of connection (`--ssh USER@HOST`); the others adjust an
    endpoint of this kind and are refused for a device that connects another way."""

    option: str  # "--ssh"
    metavar: str
    help: str
    type: type = str  # str, int, Path or bool (a switch)
    selects: bool = False

    @property
    def name(self) -> str:
        """The keyword click gives its value under ("--adb-port" -> "adb_port")."""
        return self.option.lstrip("-").replace("-", "_")


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
    endpoint_type: type[Endpoint] = Endpoint
    flags: tuple[Flag, ...] = ()  # what the command line may change about this kind's endpoints

    default_python = "python3"

    @classmethod
    def with_flags(cls, endpoint: Endpoint | None, given: dict[str, Any]) -> Endpoint:
        """`endpoint` (the profile's, when it is of this kind, else None) with this kind's flags in `given` applied;
        only called when a flag of this kind was given. Checks each value and raises UserInputError."""
        raise UserInputError(f"{cls.kind} connections take no command-line flags")

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
TRANSPORTS: Registry[type[Transport]] = Registry("connection kind", plugins=TRANSPORTS_GROUP)


def register(kind: str) -> Callable[[type[Transport]], type[Transport]]:
    """Class decorator: the transport for connections of `kind` (profile `[connection] kind = ...`); its
    `endpoint_type` must say the same kind."""
    def add(cls: type[Transport]) -> type[Transport]:
        declared = next(f.default for f in dataclasses.fields(cls.endpoint_type) if f.name == "kind")
        if declared != kind:
            raise ValueError(f"transport {kind!r}: its endpoint_type {cls.endpoint_type.__name__} has kind "
                             f"{declared!r}")
        cls.kind = kind
        return TRANSPORTS.register(kind)(cls)

    return add
