"""The project file: `edgeprune.toml` in the working folder (or `--config PATH`) holds options; flags override it.

Top-level keys apply to every verb that has the option; a `[fit]` (or `[score]`, ...) table applies to one
verb. Keys are option names with `_` or `-` (`max_mb`, `text-column`); paths are relative to the file.
"""

from pathlib import Path
from typing import Any

import click

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
    import tomllib

    from edgeprune.data.base import read_text  # only with a project file: `--help` stays fast

    text = read_text(path, what="project file")
    try:
        return path, tomllib.loads(text)
    except (ValueError, RecursionError) as error:  # TOMLDecodeError, or an integer of thousands of digits
        raise UserInputError(f"project file {path} is not valid TOML: {error}") from None


BUDGET_KEYS = ("max_mb", "max_memory_mb", "max_latency_ms", "max_energy_mj", "min_decode_tps", "max_ttft_ms",
               "min_quality")


def project_defaults(group: click.Group, explicit: Path | None) -> dict[str, Any]:
    """click's default_map from the project file: {verb: {option: value}}, a group's verbs nested under it.

    Every value is checked as its flag would be (one line naming the file and key when it is not); flags and
    EDGEPRUNE_* variables still win over it, as click gives them precedence over default_map."""
    path, data = read_project_file(explicit)
    if path is None:
        return {}
    verbs = leaf_commands(group)
    keys = {name: option_keys(command) for name, command in verbs.items()}
    tables = {name.split()[0] for name in verbs}
    known = {key for verb_keys in keys.values() for key in verb_keys} | {"fleet"}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in tables:
                raise UserInputError(f"{path}: [{key}] is not a verb; tables may be one of: "
                                     f"{', '.join(sorted(tables))}")
            group_keys = {k for name, verb_keys in keys.items() if name.startswith(f"{key} ") for k in verb_keys}
            strangers = [inner for inner in value if group_keys and _dest(inner) not in group_keys]
            if strangers:  # [devices]: each key must be an option of one of its sub-commands
                raise UserInputError(f"{path}: {key}.{strangers[0]} is not an option of any `{key}` sub-command; "
                                     f"options: {', '.join(sorted(group_keys))}")
        elif _dest(key) not in known:
            raise UserInputError(f"{path}: unknown key {key!r}; keys are the long options of the verbs, e.g. "
                                 f"{', '.join(sorted(known)[:12])}, ...")
    default_map: dict[str, Any] = {}
    for name, verb_keys in keys.items():
        table = data.get(name.split()[0], {})
        values = {**_top_level(path, verb_keys, name, data), **_table(path, verb_keys, name, table)}
        if values:
            target = default_map
            for part in name.split()[:-1]:
                target = target.setdefault(part, {})
            target[name.split()[-1]] = values
    return default_map


def leaf_commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every verb that runs, by its path under `edgeprune` ("fit", "devices check")."""
    found: dict[str, click.Command] = {}
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None:
            continue
        if isinstance(command, click.Group):
            found.update(leaf_commands(command, f"{prefix}{name} "))
        else:
            found[f"{prefix}{name}"] = command
    return found


def option_keys(command: click.Command) -> dict[str, tuple[click.Option, bool]]:
    """A verb's options by project-file key (the long flag with `_`): the option, and whether the key is a paired
    flag's negative (`no_trim_vocab = true` means trim_vocab false)."""
    keys: dict[str, tuple[click.Option, bool]] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or not param.expose_value:
            continue
        keys[param.name] = (param, False)
        keys.update({_dest(flag.lstrip("-")): (param, False) for flag in param.opts if flag.startswith("--")})
        keys.update({_dest(flag.lstrip("-")): (param, True) for flag in param.secondary_opts})
    return keys


def _top_level(path: Path, keys: dict[str, tuple[click.Option, bool]], verb: str,
               data: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys apply to every verb that has the option (`fleet` is fit's --device repeated)."""
    values = {}
    for key, value in data.items():
        if isinstance(value, dict):
            continue
        dest = "device" if key == "fleet" and verb == "fit" else _dest(key)
        if dest in keys:
            param, negative = keys[dest]
            values[param.name] = _convert(path, key, param, negative, value)
    return values


def _table(path: Path, keys: dict[str, tuple[click.Option, bool]], verb: str,
           table: dict[str, Any]) -> dict[str, Any]:
    """A [verb] table's keys: each must be an option of that verb (of one of them, for a group's table)."""
    values: dict[str, Any] = {}
    table_name = verb.split()[0]
    for key, value in table.items():
        if verb == "fit" and key == "budgets":  # [fit.budgets.DEVICE]: one device's own limits
            values["device_budgets"] = _device_budgets(path, keys, value)
            continue
        dest = "device" if verb == "fit" and key == "fleet" else _dest(key)
        if dest not in keys:
            if table_name != verb:  # [devices]: a key of another of the group's verbs
                continue
            raise UserInputError(f"{path}: {table_name}.{key} is not an option of this verb; options: "
                                 f"{', '.join(sorted(k for k, (p, neg) in keys.items() if k == p.name))}")
        param, negative = keys[dest]
        values[param.name] = _convert(path, f"{table_name}.{key}", param, negative, value)
    return values


def _device_budgets(path: Path, keys: dict[str, tuple[click.Option, bool]], tables: Any) -> dict[str, dict]:
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
            param = keys[_dest(key)][0]
            budgets[device][_dest(key)] = param.type.convert(
                _convert(path, f"fit.budgets.{device}.{key}", param, False, value), param, None)
    return budgets


def _dest(key: str) -> str:
    return key.replace("-", "_")


def _convert(path: Path, key: str, param: click.Option, negative: bool, value: Any) -> Any:
    """The value as click will read it from default_map, checked now so that an error names the file and key."""
    if param.is_flag and param.is_bool_flag:
        if not isinstance(value, bool):
            raise UserInputError(f"{path}: {key} must be true or false, got {value!r}")
        return not value if negative else value
    if param.multiple:
        return [_checked(path, key, param, item) for item in (value if isinstance(value, list) else [value])]
    number_list = getattr(param.type, "name", "") == "list"  # --ffn-fractions: "0,0.5" or [0, 0.5]
    if number_list and isinstance(value, list) and all(isinstance(item, int | float) for item in value):
        value = ",".join(map(str, value))
    return _checked(path, key, param, value)


def _checked(path: Path, key: str, param: click.Option, value: Any) -> Any:
    if isinstance(value, dict | list):
        raise UserInputError(f"{path}: {key} must be a single value, got {value!r}")
    if isinstance(value, bool):  # TOML true for a text option: not a value it takes
        raise UserInputError(f"{path}: {key} = {value!r} is not valid: it takes a value, not true/false")
    text = str(value)
    if isinstance(param.type, click.Path):
        resolved = Path(text).expanduser()  # relative to the project file, not the working folder
        return str(resolved if resolved.is_absolute() else path.parent / resolved)
    try:
        param.type.convert(text, param, None)
    except click.BadParameter as error:
        raise UserInputError(f"{path}: {key} = {value!r} is not valid: {error.format_message()}") from None
    return text
