"""Device profiles: TOML files that state a device's hardware, runtime, budgets, power and connection."""

import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeprune.data.base import read_text
from edgeprune.devices.schema import NUMBER, Key, check_section
from edgeprune.devices.transports import TRANSPORTS, Endpoint, endpoint_from_settings, endpoint_schema
from edgeprune.devices.transports.local import LocalEndpoint
from edgeprune.errors import UserInputError
from edgeprune.runtimes import RUNTIMES

SUPPORTED_ARCHES = ("x86_64", "aarch64", "armv7l")
SUPPORTED_SENSORS = ("vcgencmd", "ina3221", "tegrastats", "battery", "rapl")  # edgeprune/bench/sensors
SUPPORTED_RUNNERS = ("python", "native")
EXECUTOR_RUNNER = "executor_runner"  # the file name of the ExecuTorch runner `devices setup` builds in bin/
PROFILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")


# The runtimes' part of the schema is read from the registry when a profile is parsed, never at import: reading it
# loads the runtime plugins, and a plugin may import this module (through edgeprune.bench, say) while it loads.
def supported_runtimes() -> tuple[str, ...]:
    """Every registered runtime's name (edgeprune/runtimes, and the plugins')."""
    return tuple(RUNTIMES.names())


def native_keys() -> dict[str, str]:
    """runtime -> the [runtime] key naming the device path of its native benchmark tool."""
    return {name: RUNTIMES.get(name).native_tool for name in RUNTIMES}


def runtime_schema() -> dict[str, Key]:
    """[runtime]: the runtime's name, threads, and each registered runtime's native tool path."""
    return {"name": Key(str, choices=supported_runtimes()), "threads": Key(int, positive=True),
            "python": Key(str, False), "runner": Key(str, False, choices=SUPPORTED_RUNNERS),
            **{tool: Key(str, False) for tool in native_keys().values()},
            "env": Key(str, False), "install": Key(list, False), "runtimes": Key(list, False),
            "native": Key(list, False)}


SCHEMA: dict[str, dict[str, Key]] = {
    "": {"name": Key(str), "description": Key(str), "emulated": Key(str, False)},
    "hardware": {
        "arch": Key(str, choices=SUPPORTED_ARCHES), "cores": Key(int, positive=True),
        "ram_mb": Key(int, positive=True), "max_mhz": Key(int, False, positive=True),
        "peak_gflops": Key(NUMBER, False, positive=True), "mem_bandwidth_gbs": Key(NUMBER, False, positive=True),
        "clusters": Key(list, False),
    },
    "runtime": {},  # runtime_schema()
    "budgets": {"max_mb": Key(NUMBER, False, positive=True), "max_memory_mb": Key(NUMBER, False, positive=True),
                "max_latency_ms": Key(NUMBER, False, positive=True),
                "max_energy_mj": Key(NUMBER, False, positive=True),
                "min_decode_tps": Key(NUMBER, False, positive=True),
                "max_ttft_ms": Key(NUMBER, False, positive=True)},
    "power": {"idle_w": Key(NUMBER, positive=True), "active_w": Key(NUMBER, positive=True),
              "sensor": Key(str, False, choices=SUPPORTED_SENSORS)},
    "connection": {},  # connection_schema(): each transport's endpoint fields
}
OPTIONAL_TABLES = ("power",)
CLUSTER_SCHEMA = {"name": Key(str), "cpus": Key(list), "max_mhz": Key(int, positive=True)}


def connection_schema() -> dict[str, Key]:
    """[connection]: `kind`, one of the registered transports, and the keys of every kind's endpoint (which of them
    a kind takes is checked after, naming the kind they are for)."""
    schema = {"kind": Key(str, choices=tuple(TRANSPORTS.names()))}
    for kind in TRANSPORTS:
        for key, spec in endpoint_schema(TRANSPORTS.get(kind).endpoint_type).items():
            schema.setdefault(key, Key(spec.types, False, positive=spec.positive, maximum=spec.maximum))
    return schema


@dataclass(frozen=True)
class Cluster:
    name: str
    cpus: tuple[int, ...]
    max_mhz: int


@dataclass(frozen=True)
class PowerModel:
    idle_w: float
    active_w: float
    sensor: str | None = None  # how to measure instead of estimate, when the board has one


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    arch: str
    cores: int
    ram_mb: int
    runtime: str
    threads: int
    max_mb: float | None
    connection: str
    source: Path
    max_mhz: int | None = None
    peak_gflops: float | None = None
    mem_bandwidth_gbs: float | None = None
    clusters: tuple[Cluster, ...] = ()
    python: str | None = None  # the runner's interpreter; None: python3 on a device, this one locally
    runner: str = "python"  # "python": runner.py on the device; "native": the benchmark binaries below
    native_binaries: dict[str, str] = field(default_factory=dict)  # runtime -> device path of its benchmark tool
    native: tuple[str, ...] = ()  # runtimes timed by their native tool even where `runner` is "python"
    max_memory_mb: float | None = None
    max_latency_ms: float | None = None
    max_energy_mj: float | None = None
    min_decode_tps: float | None = None  # a generator's decode tokens/s (the Budget's min_decode_tps)
    max_ttft_ms: float | None = None  # a generator's time to first token (the Budget's max_ttft_ms)
    power: PowerModel | None = None
    endpoint: Endpoint = field(default_factory=LocalEndpoint)
    env: str | None = None  # the venv `edgeprune devices setup` makes on the device; its bin/python runs the runner
    install: tuple[str, ...] = ()  # the runtimes `devices setup` installs; () means just `runtime`
    emulated: str | None = None  # e.g. "QEMU user mode on x86_64": its timings say nothing about the real board
    runtimes: tuple[str, ...] = ()  # every runtime the board runs, searched by fit (`runtime` first); () = (runtime,)

    def runner_for(self, runtime: str) -> str:
        """"native" when this runtime is timed by its native tool on the device, else "python" (runner.py)."""
        return "native" if self.runner == "native" or runtime in self.native else "python"

    @property
    def emulation_label(self) -> str | None:
        """What every figure measured on an emulated device is labelled with, e.g. "emulated (QEMU user mode on
        x86_64)"; None for a real device."""
        return f"emulated ({self.emulated})" if self.emulated else None

    @property
    def searched_runtimes(self) -> tuple[str, ...]:
        """The runtimes fit searches on this device unless told otherwise: `runtime.runtimes`, else `runtime`."""
        return self.runtimes or (self.runtime,)


def profile_dirs() -> list[Path]:
    """Where profiles are looked up, first match wins: $EDGEPRUNE_DEVICES, the user folder, the bundled ones."""
    dirs = []
    if os.environ.get("EDGEPRUNE_DEVICES"):
        dirs += [Path(p) for p in os.environ["EDGEPRUNE_DEVICES"].split(os.pathsep) if p]
    dirs.append(Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "edgeprune" / "devices")
    dirs.append(Path(__file__).resolve().parents[2] / "devices")  # source checkout / editable install
    dirs.append(Path(sys.prefix) / "share" / "edgeprune" / "devices")  # wheel install
    return dirs


def known_devices() -> list[str]:
    """The names of the profiles in `profile_dirs()` (files only; names that are not text are left out)."""
    names = set()
    for folder in profile_dirs():
        try:
            files = [p for p in folder.glob("*.toml") if p.is_file()] if folder.is_dir() else []
        except OSError:
            continue  # an unreadable folder holds no profiles we can use
        names.update(p.stem for p in files if _is_text(p.stem))
    return sorted(names)


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes in a file name
        return False
    return name.isprintable()


def load_profile(name_or_path: str) -> DeviceProfile:
    """Load a profile by name (from `profile_dirs()`) or by path to a `.toml` file."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml":
        if not candidate.is_file():
            raise UserInputError(f"device profile {candidate} does not exist")
        return _parse(candidate)
    for folder in profile_dirs():
        path = folder / f"{name_or_path}.toml"
        if path.is_file():
            return _parse(path)
    known = ", ".join(known_devices()) or "none found"
    raise UserInputError(f"unknown device {name_or_path!r}; known devices: {known} (or pass a path to a .toml profile)")


def _table(path: Path, name: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise UserInputError(f"{path}: {name} = {value!r} must be a table: a [{name}] section with its keys")
    return value


def _clusters(path: Path, raw: list, cores: int) -> tuple[Cluster, ...]:
    clusters, seen = [], set()
    for index, item in enumerate(raw):
        where = f"hardware.clusters[{index}]"
        if not isinstance(item, dict):
            raise UserInputError(f"{path}: {where} must be a table with keys {', '.join(CLUSTER_SCHEMA)}")
        check_section(path, where, item, CLUSTER_SCHEMA)
        cpus = item["cpus"]
        if not cpus or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < cores for c in cpus):
            raise UserInputError(f"{path}: {where}.cpus = {cpus!r}; expected CPU numbers from 0 to {cores - 1}")
        if seen & set(cpus):
            raise UserInputError(f"{path}: {where}.cpus = {cpus!r} repeats CPUs of an earlier cluster")
        seen |= set(cpus)
        clusters.append(Cluster(item["name"], tuple(cpus), item["max_mhz"]))
    if clusters and len(seen) != cores:
        raise UserInputError(f"{path}: hardware.clusters cover {len(seen)} CPUs but hardware.cores = {cores}")
    return tuple(clusters)


def endpoint_from_table(path: Path, section: Any, where: str = "connection") -> Endpoint:
    """A [connection]-style table (kind, host, user, port, key, serial, ...) checked like a profile's."""
    check_section(path, where, _table(path, where, section), connection_schema())
    return _endpoint(path, section)


def _endpoint(path: Path, section: dict) -> Endpoint:
    """The endpoint of a type-checked [connection] table: only the keys its kind's transport takes, all it needs."""
    kind = section["kind"]
    allowed = endpoint_schema(TRANSPORTS.get(kind).endpoint_type)
    for key in section:
        if key != "kind" and key not in allowed:
            owners = [k for k in TRANSPORTS if key in endpoint_schema(TRANSPORTS.get(k).endpoint_type)]
            raise UserInputError(f"{path}: connection.{key} does not apply to kind = {kind!r} (it is for "
                                 f"{' or '.join(repr(o) for o in owners)}); allowed: {', '.join(allowed) or 'none'}")
    missing = [k for k, spec in allowed.items() if spec.required and k not in section]
    if missing:
        raise UserInputError(f"{path}: kind = {kind!r} needs {', '.join(f'connection.{k}' for k in missing)}")
    return endpoint_from_settings(kind, section, f"{path}: connection")


def _read_toml(path: Path) -> dict[str, Any]:
    text = read_text(path, what="device profile")
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as error:  # TOMLDecodeError, or an integer of thousands of digits
        raise UserInputError(f"{path}: device profile is not valid TOML: {error}") from None


def _parse(path: Path) -> DeviceProfile:
    data = _read_toml(path)
    tables = [t for t in SCHEMA if t]
    for key, value in data.items():
        if isinstance(value, dict) and key not in SCHEMA:
            raise UserInputError(f"{path}: unknown table [{key}]; allowed tables: {', '.join(tables)}")
    for table, keys in {**SCHEMA, "runtime": runtime_schema(), "connection": connection_schema()}.items():
        section = data if not table else data.get(table)
        if section is None:
            if table in OPTIONAL_TABLES:
                continue
            raise UserInputError(f"{path}: missing table [{table}] with keys {', '.join(keys)}")
        check_section(path, table, _table(path, table, section) if table else section, keys,
                       skip=tuple(tables) if not table else ())
    if not PROFILE_NAME.fullmatch(data["name"]):
        raise UserInputError(f"{path}: name = {data['name']!r} must be a short name of letters, digits, '.', '_', "
                             "'-' (it names the benchmark result files)")
    hardware, runtime, budgets = data["hardware"], data["runtime"], data["budgets"]
    if runtime["threads"] > hardware["cores"]:
        raise UserInputError(f"{path}: runtime.threads = {runtime['threads']} exceeds hardware.cores = "
                             f"{hardware['cores']}")
    power: PowerModel | None = None
    if "power" in data:
        idle, active = data["power"]["idle_w"], data["power"]["active_w"]
        if active < idle:
            raise UserInputError(f"{path}: power.active_w = {active} is below power.idle_w = {idle}")
        power = PowerModel(float(idle), float(active), data["power"].get("sensor"))

    env = runtime.get("env")
    if env is not None and (not env.startswith("/") or any(c in env for c in "\n\r\0")):
        raise UserInputError(f"{path}: runtime.env = {env!r} must be an absolute path on the device")
    supported, tools = supported_runtimes(), native_keys()
    binaries = {name: runtime[key] for name, key in tools.items() if key in runtime}
    native = runtime.get("native", [])
    if any(name not in supported for name in native):
        raise UserInputError(f"{path}: runtime.native = {native!r}; supported: {', '.join(supported)}")
    for name in native:
        if RUNTIMES.get(name).setup_builds_native_tool and name not in binaries and env:
            binaries[name] = f"{env}/bin/{RUNTIMES.get(name).native_tool}"  # where `devices setup` builds it
    runner = runtime.get("runner", "python")
    if runner == "native" and not binaries:
        raise UserInputError(f"{path}: runtime.runner = 'native' needs runtime.benchmark_model (LiteRT) and/or "
                             "runtime.executor_runner (ExecuTorch): the device path of the benchmark binary")
    for name in (n for n in native if n not in binaries):
        also = (", or runtime.env, where `devices setup` builds the ExecuTorch runner"
                if RUNTIMES.get(name).setup_builds_native_tool else "")
        raise UserInputError(f"{path}: runtime.native = {native!r} needs the device path of each tool: "
                             f"runtime.{tools[name]}{also}")
    install = runtime.get("install", [])
    if any(name not in supported for name in install):
        raise UserInputError(f"{path}: runtime.install = {install!r}; supported: {', '.join(supported)}")
    runtimes = runtime.get("runtimes", [])
    if any(name not in supported for name in runtimes):
        raise UserInputError(f"{path}: runtime.runtimes = {runtimes!r}; supported: {', '.join(supported)}")
    if runtimes and runtime["name"] not in runtimes:
        raise UserInputError(f"{path}: runtime.runtimes = {runtimes!r} must include runtime.name = "
                             f"{runtime['name']!r} (the one a single-runtime fit and bench use)")

    def number(section: dict, key: str) -> Any:
        return None if key not in section else float(section[key])

    return DeviceProfile(
        name=data["name"], description=data["description"], arch=hardware["arch"],
        cores=hardware["cores"], ram_mb=hardware["ram_mb"], runtime=runtime["name"],
        threads=runtime["threads"], max_mb=number(budgets, "max_mb"),
        connection=data["connection"]["kind"], source=path,
        max_mhz=hardware.get("max_mhz"), peak_gflops=number(hardware, "peak_gflops"),
        mem_bandwidth_gbs=number(hardware, "mem_bandwidth_gbs"),
        clusters=_clusters(path, hardware.get("clusters", []), hardware["cores"]),
        python=runtime.get("python") or (f"{env}/bin/python" if env else None), runner=runner, native_binaries=binaries,
        native=tuple(dict.fromkeys(native)),
        max_memory_mb=number(budgets, "max_memory_mb"),
        max_latency_ms=number(budgets, "max_latency_ms"), max_energy_mj=number(budgets, "max_energy_mj"),
        min_decode_tps=number(budgets, "min_decode_tps"), max_ttft_ms=number(budgets, "max_ttft_ms"), power=power,
        endpoint=_endpoint(path, data["connection"]),
        env=env, install=tuple(dict.fromkeys(install)), emulated=data.get("emulated"),
        runtimes=tuple(dict.fromkeys([runtime["name"], *runtimes])) if runtimes else (),
    )
