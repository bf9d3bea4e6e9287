"""Device profiles: TOML files that state a device's hardware, runtime, budgets and connection."""

import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeprune.errors import UserInputError

SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "": {"name": str, "description": str},
    "hardware": {"arch": str, "cores": int, "ram_mb": int},
    "runtime": {"name": str, "threads": int},
    "budgets": {"max_mb": (int, float)},
    "connection": {"kind": str},
}
SUPPORTED_RUNTIMES = ("executorch",)
SUPPORTED_CONNECTIONS = ("local",)


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
    names = set()
    for folder in profile_dirs():
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml"))
    return sorted(names)


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


def _parse(path: Path) -> DeviceProfile:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UserInputError(f"{path}: cannot read device profile: {error}") from None
    tables = [t for t in SCHEMA if t]
    for key, value in data.items():
        if isinstance(value, dict) and key not in SCHEMA:
            raise UserInputError(f"{path}: unknown table [{key}]; allowed tables: {', '.join(tables)}")
    for table, fields in SCHEMA.items():
        section = data if not table else data.get(table)
        if section is None:
            raise UserInputError(f"{path}: missing table [{table}] with keys {', '.join(fields)}")
        for key, value in section.items():
            if not table and key in SCHEMA:
                continue
            where = f"{table}.{key}" if table else key
            if key not in fields:
                scope = f"[{table}]" if table else "the top level"
                raise UserInputError(f"{path}: unknown key {where!r}; allowed in {scope}: {', '.join(fields)}")
            if not isinstance(value, fields[key]) or isinstance(value, bool):
                raise UserInputError(f"{path}: {where} = {value!r} has the wrong type")
        optional = table == "budgets"  # budgets may be left to the command line
        missing = [k for k in fields if k not in section and not optional]
        if missing:
            raise UserInputError(f"{path}: missing {', '.join(f'{table}.{k}' if table else k for k in missing)}")
    runtime, connection = data["runtime"]["name"], data["connection"]["kind"]
    if runtime not in SUPPORTED_RUNTIMES:
        raise UserInputError(f"{path}: runtime.name = {runtime!r}; supported: {', '.join(SUPPORTED_RUNTIMES)}")
    if connection not in SUPPORTED_CONNECTIONS:
        raise UserInputError(f"{path}: connection.kind = {connection!r}; supported: {', '.join(SUPPORTED_CONNECTIONS)}")
    for where, value in (("hardware.cores", data["hardware"]["cores"]), ("runtime.threads", data["runtime"]["threads"]),
                         ("budgets.max_mb", data["budgets"].get("max_mb", 1))):
        if value <= 0:
            raise UserInputError(f"{path}: {where} = {value} must be positive")
    max_mb: Any = data["budgets"].get("max_mb")
    return DeviceProfile(
        name=data["name"], description=data["description"], arch=data["hardware"]["arch"],
        cores=data["hardware"]["cores"], ram_mb=data["hardware"]["ram_mb"], runtime=runtime,
        threads=data["runtime"]["threads"], max_mb=None if max_mb is None else float(max_mb),
        connection=connection, source=path,
    )
