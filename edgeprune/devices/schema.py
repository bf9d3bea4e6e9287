"""The checks a TOML table of edgeprune's (a device profile's tables, a connection) goes through: each key's type,
range and choices, one line naming the file and the key on the first that fails.

Written here rather than with a schema library: the messages ("pi5.toml: hardware.cores = 0 must be positive")
are the product, and the tables are few and flat."""

import math
from dataclasses import dataclass
from pathlib import Path

from edgeprune.errors import UserInputError

NUMBER = (int, float)
MAX_NUMBER = 1e12  # no count, size, rate or power of a device comes near it; beyond it a number is a typo


@dataclass(frozen=True)
class Key:
    types: type | tuple[type, ...]
    required: bool = True
    choices: tuple[str, ...] = ()
    positive: bool = False
    maximum: float = MAX_NUMBER


def type_name(types: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "an array"}
    if types == NUMBER:
        return "a number"
    return names.get(types, str(types)) if isinstance(types, type) else " or ".join(names[t] for t in types)


def check_section(path: Path, table: str, section: dict, schema: dict[str, Key], skip: tuple = ()) -> None:
    """Every key of `section` known to `schema`, of its type, in its range and choices; every required key there."""
    scope = f"[{table}]" if table else "the top level"
    for key, value in section.items():
        if key in skip:
            continue
        where = f"{table}.{key}" if table else key
        if key not in schema:
            raise UserInputError(f"{path}: unknown key {where!r}; allowed in {scope}: {', '.join(schema)}")
        spec = schema[key]
        is_bool = isinstance(value, bool)
        if not isinstance(value, spec.types) or is_bool != (spec.types is bool):
            raise UserInputError(f"{path}: {where} = {value!r} has the wrong type; expected {type_name(spec.types)}")
        if spec.choices and value not in spec.choices:
            raise UserInputError(f"{path}: {where} = {value!r}; supported: {', '.join(spec.choices)}")
        if isinstance(value, int | float) and not is_bool:
            check_number(path, where, value, spec)
    missing = [k for k, spec in schema.items() if spec.required and k not in section]
    if missing:
        raise UserInputError(f"{path}: missing {', '.join(f'{table}.{k}' if table else k for k in missing)}")


def check_number(path: Path, where: str, value: int | float, spec: Key) -> None:
    """Finite, within `spec.maximum` and, for `positive` keys, above 0: nan, inf and typos of many digits fail."""
    shown = value if isinstance(value, float) or abs(value) < 10 ** 15 else "a number of more than 15 digits"
    if isinstance(value, float) and not math.isfinite(value):
        raise UserInputError(f"{path}: {where} = {value} must be a finite number")
    if spec.positive and value <= 0:
        raise UserInputError(f"{path}: {where} = {shown} must be positive")
    if abs(value) > spec.maximum:
        raise UserInputError(f"{path}: {where} = {shown} is out of range; at most {spec.maximum:g}")

