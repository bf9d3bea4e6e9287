"""The project file: `edgeprune.toml` in the working folder (or `--config PATH`) holds options; flags override it.

Top-level keys apply to every verb that has the option; a `[fit]` (or `[score]`, ...) table applies to one
verb. Keys are option names with `_` or `-` (`max_mb`, `text-column`); paths are relative to the file.
"""

import argparse
import math
import tomllib
from pathlib import Path
from typing import Any

from edgeprune.data.base import read_text
from edgeprune.errors import UserInputError

PROJECT_FILE = "edgeprune.toml"


def split_config_flag(argv: list[str]) -> tuple[Path | None, list[str]]:
    """Take `--config PATH` (anywhere) out of the arguments."""
    rest, config = [], None
    items = iter(argv)
    for item in items:
        if item == "--config":
            value = next(items, None)
            if value is None:
                raise UserInputError("--config needs a path to a TOML project file")
            config = Path(value)
        elif item.startswith("--config="):
            config = Path(item.split("=", 1)[1])
        else:
            rest.append(item)
    return config, rest


def read_project_file(explicit: Path | None, cwd: Path | None = None) -> tuple[Path | None, dict[str, Any]]:
    path = explicit if explicit is not None else (cwd or Path.cwd()) / PROJECT_FILE
    if not path.is_file():
        if explicit is not None:
            state = "is not a file" if path.exists() else "does not exist"
            raise UserInputError(f"project file {explicit} {state}; --config names a TOML file")
        if path.exists():
            raise UserInputError(f"{path} is not a file; the project file is a TOML file")
        return None, {}
    text = read_text(path, what="project file")
    try:
        return path, tomllib.loads(text)
    except (ValueError, RecursionError) as error:  # TOMLDecodeError, or an integer of thousands of digits
        raise UserInputError(f"project file {path} is not valid TOML: {error}") from None


def defaults_for(verb: str, subparser: argparse.ArgumentParser, verbs: list[str], path: Path,
                 data: dict[str, Any]) -> dict[str, Any]:
    """Option defaults for `verb` from the project file, converted and checked like the flags."""
    actions = {a.dest: a for a in subparser._actions if a.option_strings and a.dest != "help"}
    # paired flags such as --trim-vocab / --no-trim-vocab share a destination: the key names the flag
    actions.update({_dest(option[2:]): a for a in subparser._actions for option in a.option_strings
                    if type(a) is argparse._StoreConstAction and option.startswith("--")})
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in verbs:
                raise UserInputError(f"{path}: [{key}] is not a verb; tables may be one of: {', '.join(verbs)}")
            if key == verb:
                for inner, inner_value in value.items():
                    if verb == "fit" and inner == "budgets":  # [fit.budgets.DEVICE]: one device's own limits
                        defaults["device_budgets"] = _device_budgets(path, actions, inner_value)
                        continue
                    inner = "device" if verb == "fit" and inner == "fleet" else inner
                    target = actions[_dest(inner)].dest if _dest(inner) in actions else _dest(inner)
                    defaults[target] = _convert(path, f"{key}.{inner}", actions, _dest(inner), inner_value,
                                                required=True)
            continue
        if key == "fleet" and verb != "fit":
            continue
        dest = "device" if key == "fleet" else _dest(key)  # fleet = ["pi5", "pi4"]: fit's --device repeated
        if dest in actions:
            defaults[actions[dest].dest] = _convert(path, key, actions, dest, value, required=False)
    return defaults


def unknown_top_level_keys(path: Path, data: dict[str, Any], parsers: dict[str, argparse.ArgumentParser]) -> None:
    known = {a.dest for p in parsers.values() for a in p._actions if a.option_strings and a.dest != "help"}
    known |= {_dest(o[2:]) for p in parsers.values() for a in p._actions for o in a.option_strings if o[:2] == "--"}
    known.add("fleet")
    for key, value in data.items():
        if not isinstance(value, dict) and _dest(key) not in known:
            raise UserInputError(f"{path}: unknown key {key!r}; keys are the long options of the verbs, e.g. "
                                 f"{', '.join(sorted(known)[:12])}, ...")


BUDGET_KEYS = ("max_mb", "max_memory_mb", "max_latency_ms", "max_energy_mj", "min_quality")


def _device_budgets(path: Path, actions: dict[str, argparse.Action], tables: Any) -> dict[str, dict[str, Any]]:
    """[fit.budgets.pi4] max_mb = 30, ...: per device, limits converted and checked like the flags."""
    if not isinstance(tables, dict) or not all(isinstance(v, dict) for v in tables.values()):
        raise UserInputError(f"{path}: fit.budgets holds one table per device, e.g. [fit.budgets.pi4] max_mb = 30")
    budgets: dict[str, dict[str, Any]] = {}
    for device, limits in tables.items():
        budgets[device] = {}
        for key, value in limits.items():
            if _dest(key) not in BUDGET_KEYS:
                raise UserInputError(f"{path}: fit.budgets.{device}.{key} is not a budget; budgets: "
                                     f"{', '.join(BUDGET_KEYS)}")
            budgets[device][_dest(key)] = _convert(path, f"fit.budgets.{device}.{key}", actions, _dest(key), value,
                                                   required=True)
    return budgets


def _dest(key: str) -> str:
    return key.replace("-", "_")


def _convert(path: Path, key: str, actions: dict[str, argparse.Action], dest: str, value: Any,
             required: bool) -> Any:
    action = actions.get(dest)
    if action is None:
        if required:
            raise UserInputError(f"{path}: {key} is not an option of this verb; options: "
                                 f"{', '.join(sorted(actions))}")
        return value
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise UserInputError(f"{path}: {key} must be true or false, got {value!r}")
        return value
    if type(action) is argparse._StoreConstAction:  # one of a pair: trim-vocab = true / false
        if not isinstance(value, bool):
            raise UserInputError(f"{path}: {key} must be true or false, got {value!r}")
        return action.const if value else (not action.const if isinstance(action.const, bool) else action.default)
    if isinstance(action, argparse._AppendAction):
        values = value if isinstance(value, list) else [value]
        return [_typed(path, key, action, item) for item in values]
    return _typed(path, key, action, value)


def _typed(path: Path, key: str, action: argparse.Action, value: Any) -> Any:
    if isinstance(value, dict | list):
        raise UserInputError(f"{path}: {key} must be a single value, got {value!r}")
    text = str(value)
    if action.type is Path:
        resolved = Path(text).expanduser()
        return resolved if resolved.is_absolute() else path.parent / resolved
    try:
        converted = action.type(text) if action.type is not None else text
    except (argparse.ArgumentTypeError, ValueError) as error:
        raise UserInputError(f"{path}: {key} = {value!r} is not valid: {error}") from None
    numbers = converted if isinstance(converted, tuple) else (converted,)
    if any(isinstance(number, float) and not math.isfinite(number) for number in numbers):
        raise UserInputError(f"{path}: {key} = {value!r}; every number must be finite")
    if action.choices is not None and converted not in action.choices:
        raise UserInputError(f"{path}: {key} = {value!r}; choose from: {', '.join(map(str, action.choices))}")
    return converted
