"""An Android device over ADB, with the real `adb` client on its own server port (`adb -P PORT`).

Files live under /data/local/tmp. Legacy `adb shell` returns no exit status and merges stderr into
stdout, so every command ends with a marker line carrying `$?`, parsed by `split_exit_marker`. Commands
run in a process group of their own (`guarded_command`): a timeout or Ctrl-C kills the local adb client,
which leaves them running on the phone, so a second `adb shell` ends the group there.
"""

import dataclasses
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgeprune.devices.transports.base import (
    MAX_PORT,
    CommandResult,
    DeviceTimeoutError,
    Endpoint,
    Flag,
    Transport,
    bounds,
    guarded_command,
    register,
    stop_command,
)
from edgeprune.devices.transports.workdirs import make_remote_workdir_line, parse_made, remove_folders_line
from edgeprune.errors import DeviceUnreachableError, EdgepruneError, UserInputError

RC_MARKER = "__edgeprune_rc="
DEVICE_ROOT = "/data/local/tmp"
UNREACHABLE = ("not found", "no devices", "device offline", "unauthorized", "closed", "cannot connect",
               "connection refused", "protocol fault", "failed to connect")


def with_exit_marker(line: str) -> str:
    """The shell line followed by a marker line with its exit status."""
    return f"{line}; printf '\\n{RC_MARKER}%d\\n' $?"


def split_exit_marker(output: str) -> tuple[int, str]:
    """(exit status, output before the marker) from `adb shell` output of a `with_exit_marker` line.

    Raises ValueError when the marker is missing: the command did not run to its end.
    """
    text = output.replace("\r\n", "\n")
    index = text.rfind(f"\n{RC_MARKER}")
    if index < 0:
        raise ValueError("no exit-status marker in the output")
    match = re.match(rf"\n{re.escape(RC_MARKER)}(-?\d+)\n?$", text[index:])
    if match is None:
        raise ValueError(f"malformed exit-status marker: {text[index:index + 40]!r}")
    return int(match.group(1)), text[:index]


@dataclass(frozen=True)
class CpuPolicy:
    cpus: tuple[int, ...]
    max_khz: int


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """CPU numbers from sysfs lists: '0-3,8' (ranges) or '0 1 2 3' (related_cpus)."""
    cpus: list[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return tuple(sorted(set(cpus)))


def parse_cpufreq_policies(listing: str) -> list[CpuPolicy]:
    """Policies from `grep -H . /sys/devices/system/cpu/cpufreq/policy*/{related_cpus,cpuinfo_max_freq}`."""
    found: dict[str, dict[str, str]] = {}
    for line in listing.replace("\r\n", "\n").splitlines():
        path, sep, value = line.partition(":")
        match = re.search(r"(policy\d+)/(related_cpus|cpuinfo_max_freq)$", path)
        if sep and match:
            found.setdefault(match.group(1), {})[match.group(2)] = value
    policies = [CpuPolicy(parse_cpu_list(v["related_cpus"]), int(v["cpuinfo_max_freq"]))
                for v in found.values() if "related_cpus" in v and "cpuinfo_max_freq" in v]
    if not policies:
        raise ValueError("no cpufreq policies with related_cpus and cpuinfo_max_freq in the listing")
    return policies


def taskset_mask(policies: Iterable[CpuPolicy], threads: int) -> str:
    """Hex CPU mask for `taskset` that puts `threads` threads on the fastest cores (all cores at most)."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    ordered = [cpu for policy in sorted(policies, key=lambda p: (-p.max_khz, p.cpus))
               for cpu in policy.cpus]
    if not ordered:
        raise ValueError("no CPUs in the policies")
    mask = 0
    for cpu in ordered[:threads]:
        mask |= 1 << cpu
    return f"{mask:x}"


ADB_SERIAL = re.compile(r"[A-Za-z0-9_.:][A-Za-z0-9_.:@+-]{0,127}")  # used with fullmatch


def check_adb_serial(serial: str, where: str) -> None:
    if not ADB_SERIAL.fullmatch(serial):
        raise UserInputError(f"{where}: {serial!r} is not an adb serial (letters, digits, '.', ':', '_', '-'; "
                             "see `adb devices`)")


@dataclass(frozen=True, kw_only=True)
class AdbEndpoint(Endpoint):
    """An Android device through the adb client and its server on this machine."""

    kind: str = field(default="adb", init=False)
    serial: str  # as `adb devices` lists it
    adb_port: int = field(default=5037, metadata=bounds(positive=True, maximum=MAX_PORT))  # the adb server's
    connect_timeout_s: float = field(default=10.0, metadata=bounds(positive=True, maximum=3600))

    @property
    def record_key(self) -> str:
        return f"adb:{self.serial}"

    def check(self, where: str) -> None:
        check_adb_serial(self.serial, f"{where}.serial")


@register("adb")
class AdbTransport(Transport):
    endpoint_type = AdbEndpoint
    flags = (
        Flag("--adb", "SERIAL", "reach the device over adb here (a serial from `adb devices`) instead of the "
             "profile's connection", selects=True),
        Flag("--adb-port", "PORT", "the adb server's port (default: the profile's, else 5037)", type=int),
    )

    @classmethod
    def with_flags(cls, endpoint: Endpoint | None, given: dict) -> Endpoint:
        port = given.get("adb_port")
        if port is not None and not 0 < port <= MAX_PORT:
            raise UserInputError(f"--adb-port {port}: expected a TCP port from 1 to 65535")
        if given.get("adb") is not None:
            check_adb_serial(given["adb"], "--adb")
            endpoint = (dataclasses.replace(endpoint, serial=given["adb"]) if isinstance(endpoint, AdbEndpoint)
                        else AdbEndpoint(serial=given["adb"]))  # the profile's server port and timeout stay
        if port is not None:
            endpoint = dataclasses.replace(endpoint, adb_port=port)
        return endpoint

    @property
    def label(self) -> str:
        return f"adb device {self.endpoint.serial}"

    def adb_argv(self) -> list[str]:
        if not self.endpoint.serial:
            raise UserInputError("an adb connection needs a serial (connection.serial; see `adb devices`)")
        return ["adb", "-P", str(self.endpoint.adb_port), "-s", self.endpoint.serial]

    def _adb(self, args: Sequence[str], timeout_s: float) -> tuple[int, str]:
        """Run one adb client command; one retry when the device is not there, then DeviceUnreachableError."""
        output = ""
        for _ in range(2):
            try:
                done = subprocess.run([*self.adb_argv(), *args], stdin=subprocess.DEVNULL, capture_output=True,
                                      text=True, errors="replace", timeout=timeout_s)
            except FileNotFoundError:
                raise UserInputError("the adb client is not installed (apt-get install adb)") from None
            except subprocess.TimeoutExpired:
                raise DeviceTimeoutError(f"adb {args[0]} on {self.label} ran past its {timeout_s:g} s "
                                         "timeout") from None
            output = done.stdout + done.stderr
            lowered = output.lower()
            if done.returncode == 0 or not any(p in lowered for p in UNREACHABLE):
                return done.returncode, done.stdout if done.returncode == 0 else output
        reason = output.strip().splitlines()[-1] if output.strip() else "no answer"
        raise DeviceUnreachableError(f"cannot reach {self.label} (tried twice): {reason}")

    def shell(self, line: str, timeout_s: float = 600) -> CommandResult:
        code, output = self._adb(["shell", with_exit_marker(line)], timeout_s)
        try:
            status, text = split_exit_marker(output)
        except ValueError:
            raise DeviceUnreachableError(f"{self.label} dropped the command before it finished "
                                         f"(adb exit {code}): {output.strip()[-200:]}") from None
        return CommandResult(status, text, "")

    def _make_workdir(self) -> str:
        done = self.shell(make_remote_workdir_line(DEVICE_ROOT), 60)
        path, orphans = parse_made(done.stdout)
        if done.exit_code != 0 or path is None or not path.startswith(DEVICE_ROOT):
            raise EdgepruneError(f"cannot make a work folder on {self.label}: {done.stdout.strip()}")
        if orphans:  # left by fits killed on this machine: removed on the way (workdirs)
            self.shell(remove_folders_line(orphans), 60)
        return path

    def push(self, local: Path, name: str | None = None) -> str:
        target = self.remote_path(name or Path(local).name)
        code, output = self._adb(["push", str(local), target], 3600)
        if code != 0:
            raise EdgepruneError(f"cannot push {local} to {self.label}: {output.strip()}")
        return target

    def run(self, argv: Sequence[str], timeout_s: float = 600, env: Mapping[str, str] | None = None) -> CommandResult:
        tag = self.next_run_tag()
        line = guarded_command(argv, self.workdir, tag, env)  # the work folder first: its own errors stand
        try:
            return self.shell(line, timeout_s)
        except (DeviceTimeoutError, KeyboardInterrupt):
            try:  # end it on the phone too: the adb client is gone, its side on the phone is not
                self.shell(stop_command(self.workdir, tag), 30)
            except EdgepruneError as error:
                sys.stderr.write(f"edgeprune: could not stop the command on {self.label}: {error}\n")
            raise

    def fetch(self, name: str, local: Path) -> Path:
        code, output = self._adb(["pull", self.remote_path(name), str(local)], 3600)
        if code != 0:
            raise EdgepruneError(f"cannot fetch {name} from {self.label}: {output.strip()}")
        return Path(local)

    def big_core_mask(self, threads: int) -> str:
        """A taskset mask for the fastest cores, read from the device's cpufreq policies."""
        listing = self.shell("grep -H . /sys/devices/system/cpu/cpufreq/policy*/related_cpus "
                             "/sys/devices/system/cpu/cpufreq/policy*/cpuinfo_max_freq", 60)
        return taskset_mask(parse_cpufreq_policies(listing.stdout), threads)

    def pin_prefix(self, threads: int) -> list[str]:
        try:
            return ["taskset", self.big_core_mask(threads)]
        except ValueError:  # no cpufreq policies exposed (an emulator): leave placement to the kernel
            return []

    def _remove_workdir(self, path: str) -> None:
        try:
            self.shell(f"rm -rf {shlex.quote(path)}", 60)
        except EdgepruneError:
            pass  # the device went away; /data/local/tmp is its scratch space
