"""The two reader interfaces (power sensors, thermal readers), their registries, and where they read from."""

import glob
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field


class SensorUnavailable(Exception):
    """The reader cannot read on this device; the message says why (missing file, permission, command)."""


class Environment:
    """Where readers look: sysfs paths under `root` and commands on PATH. Tests point `root` at a fixture tree."""

    def __init__(self, root: str = "/", command_timeout_s: float = 10.0) -> None:
        self.root = root
        self.command_timeout_s = command_timeout_s

    def path(self, absolute: str) -> str:
        return os.path.join(self.root, absolute.lstrip("/"))

    def read(self, absolute: str) -> str:
        path = self.path(absolute)
        try:
            with open(path) as handle:
                return handle.read().strip()
        except FileNotFoundError:
            raise SensorUnavailable(f"{absolute} does not exist") from None
        except PermissionError:
            raise SensorUnavailable(f"{absolute} is not readable by this user (permission denied)") from None
        except OSError as error:
            raise SensorUnavailable(f"{absolute}: {error.strerror or error}") from None

    def glob(self, pattern: str) -> list[str]:
        """Absolute device paths (root stripped) matching `pattern`, sorted."""
        prefix = self.path("/")
        return sorted("/" + os.path.relpath(p, prefix) for p in glob.glob(self.path(pattern)))

    def run(self, argv: list[str]) -> str:
        if shutil.which(argv[0]) is None:
            raise SensorUnavailable(f"{argv[0]} is not installed")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.command_timeout_s)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SensorUnavailable(f"{' '.join(argv)}: {error}") from None
        if done.returncode != 0:
            raise SensorUnavailable(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-200:]}")
        return done.stdout


class PowerSensor:
    """A source of board power. Either a cumulative energy counter (`counter = True`: `read` gives a raw
    reading and `joules_between` the energy between two readings) or an instantaneous meter (`read`
    gives watts, which the runner samples and integrates over time)."""

    name = ""
    counter = False
    sample_interval_s = 0.05  # how often to sample an instantaneous meter; commands are slower

    def __init__(self, env: Environment | None = None) -> None:
        self.env = env or Environment()

    def read(self) -> object:
        raise NotImplementedError

    def joules_between(self, before: object, after: object) -> float:
        raise NotImplementedError(f"{self.name} is not an energy counter")

    def describe(self) -> str:
        """What exactly is measured (rail, domain), for the result's energy detail."""
        return self.name


@dataclass
class ThermalState:
    temperatures_c: dict[str, float] = field(default_factory=dict)
    throttled: bool = False
    reasons: list[str] = field(default_factory=list)  # why `throttled`, in words
    raw: str = ""  # the reader's own state word, e.g. a throttled bit field, to compare before and after


class ThermalReader:
    name = ""

    def __init__(self, env: Environment | None = None) -> None:
        self.env = env or Environment()

    def read(self) -> ThermalState:
        raise NotImplementedError

    def changes(self, before: ThermalState, after: ThermalState) -> list[str]:
        """Throttling events between two readings that neither reading shows by itself (sticky bits)."""
        return []


POWER_SENSORS: dict[str, type[PowerSensor]] = {}
THERMAL_READERS: dict[str, type[ThermalReader]] = {}


def register_power(cls: type[PowerSensor]) -> type[PowerSensor]:
    POWER_SENSORS[cls.name] = cls
    return cls


def register_thermal(cls: type[ThermalReader]) -> type[ThermalReader]:
    THERMAL_READERS[cls.name] = cls
    return cls


def power_sensor(name: str, env: Environment | None = None) -> PowerSensor:
    if name not in POWER_SENSORS:
        raise ValueError(f"unknown power sensor {name!r}; known: {', '.join(sorted(POWER_SENSORS))}")
    return POWER_SENSORS[name](env)


def first_number(text: str, convert: Callable[[str], float] = float) -> float:
    try:
        return convert(text.split()[0])
    except (IndexError, ValueError):
        raise SensorUnavailable(f"expected a number, read {text[:40]!r}") from None
