"""The lab's boards: `boards.toml` names each physical board, its device profile, how to reach it and, for a
board only one machine can reach (a phone on USB), the Ray resource of the node it hangs off.

    [[board]]
    name = "pi5-a"
    profile = "pi5"                      # a profile name, or a path relative to this file
    [board.connection]                   # optional: the profile's [connection] otherwise
    kind = "ssh"
    host = "10.0.0.21"
    user = "pi"

    [[board]]
    name = "pixel-7"
    profile = "android-arm64"
    node_resource = "board:pixel-7"      # the node started with: ray start --resources '{"board:pixel-7": 1}'
    [board.connection]
    kind = "adb"
    serial = "2A131FDH2002X1"

Several boards of one profile share that profile's benchmarks (edgeprune.cluster.pool).
"""

import dataclasses
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeprune.data.base import read_text
from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.devices.profile import endpoint_from_table
from edgeprune.errors import UserInputError

BOARD_KEYS = ("name", "profile", "connection", "node_resource")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # also a Ray resource name and a folder name


@dataclass(frozen=True)
class Board:
    """One physical board: its name, its profile (with this board's connection) and where its actor must run."""

    name: str
    profile: DeviceProfile
    node_resource: str | None = None  # a custom Ray resource only the node that reaches the board has

    @property
    def profile_name(self) -> str:
        return self.profile.name


def load_boards(path: str | Path) -> list[Board]:
    """Every board of a boards.toml, checked: unique names, known profiles, valid connections."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"boards file {path} does not exist; it lists the lab's boards ([[board]] tables)")
    try:
        data = tomllib.loads(read_text(path, what="boards file"))
    except (ValueError, RecursionError) as error:
        raise UserInputError(f"{path}: not valid TOML: {error}") from None
    unknown = sorted(set(data) - {"board"})
    if unknown:
        raise UserInputError(f"{path}: unknown key {unknown[0]!r}; a boards file holds [[board]] tables only")
    entries = data.get("board")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise UserInputError(f"{path}: no boards; describe each with a [[board]] table (name, profile)")
    boards = [_board(path, index, entry) for index, entry in enumerate(entries)]
    names = [board.name for board in boards]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UserInputError(f"{path}: board name {repeated[0]!r} appears more than once; names must be unique")
    return boards


def _board(path: Path, index: int, entry: dict[str, Any]) -> Board:
    where = f"board[{index}]"
    for key in entry:
        if key not in BOARD_KEYS:
            raise UserInputError(f"{path}: {where}.{key} is not a board key; keys: {', '.join(BOARD_KEYS)}")
    for key in ("name", "profile"):
        if not isinstance(entry.get(key), str):
            raise UserInputError(f"{path}: {where} needs {key} = \"...\" (a string)")
    name = entry["name"]
    if not NAME.match(name):
        raise UserInputError(f"{path}: {where}.name = {name!r}: use letters, digits, '-', '_' and '.' (at most 64)")
    reference = entry["profile"]
    profile = load_profile(str(path.parent / reference) if reference.endswith(".toml") else reference)
    if "connection" in entry:
        profile = dataclasses.replace(profile, endpoint=endpoint_from_table(path, entry["connection"],
                                                                            f"{where}.connection"))
    resource = entry.get("node_resource")
    if resource is not None and not (isinstance(resource, str) and resource):
        raise UserInputError(f"{path}: {where}.node_resource must be the name of a Ray resource, e.g. \"board:{name}\"")
    return Board(name, profile, resource)
