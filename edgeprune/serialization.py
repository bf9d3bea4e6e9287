"""JSON round-trip for the dataclasses users save (plans, recipes, results)."""

import dataclasses
import json
import os
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from edgeprune.errors import DiskFullError

T = TypeVar("T")


def json_codec(cls: type[T]) -> type[T]:
    """Mark a dataclass whose fields are not plain JSON (arrays, a version of its own) as bringing its own codec:
    its `to_dict()` and one-argument classmethod `from_dict(data)` replace the field-by-field default."""
    cls.__json_codec__ = True  # type: ignore[attr-defined]
    return cls


def _has_codec(cls: type) -> bool:
    return bool(cls.__dict__.get("__json_codec__"))


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and _has_codec(type(value)):
        return to_jsonable(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def from_jsonable(cls: type[T], data: Any) -> T:
    """Build `cls` from what `to_jsonable` produced, following the type hints."""
    return _convert(cls, data)


def _convert(hint: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(options[0], data) if len(options) == 1 else data
    if dataclasses.is_dataclass(hint) and _has_codec(hint):
        return hint.from_dict(data)
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        known = {f.name for f in dataclasses.fields(hint)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"{hint.__name__}: unknown fields {sorted(unknown)}; known: {sorted(known)}")
        return hint(**{k: _convert(hints[k], v) for k, v in data.items()})
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v) for v in data]
    if origin is tuple:
        items = typing.get_args(hint)
        if len(items) == 2 and items[1] is Ellipsis:  # tuple[X, ...]
            return tuple(_convert(items[0], v) for v in data)
        if items and len(items) == len(data):  # tuple[X, Y]
            return tuple(_convert(item, v) for item, v in zip(items, data, strict=True))
        return tuple(data)
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        return {key_type(k): _convert(value_type, v) for k, v in data.items()}
    if hint is Path:
        return Path(data)
    return data


def json_text(value: Any, indent: int = 2, _depth: int = 0) -> str:
    """JSON indented like `json.dumps(value, indent=2)`, except that a list of numbers (token ids, kept neurons,
    latency samples) stays on one line: json.dumps would give every one its own line (a trimmed vocabulary in a
    fit's result.json was 60,000 lines). `json.loads` reads it back to the same value."""
    value = to_jsonable(value)
    scalars = (int, float, bool, type(None))
    if isinstance(value, list) and all(isinstance(v, scalars) for v in value) or not isinstance(value, dict | list):
        return json.dumps(value)
    if not value:
        return "{}" if isinstance(value, dict) else "[]"
    inner = " " * (indent * (_depth + 1))
    items = ([f"{json.dumps(str(k))}: {json_text(v, indent, _depth + 1)}" for k, v in value.items()]
             if isinstance(value, dict) else [json_text(v, indent, _depth + 1) for v in value])
    close = "}" if isinstance(value, dict) else "]"
    return ("{" if isinstance(value, dict) else "[") + "\n" + ",\n".join(inner + item for item in items) + \
        "\n" + " " * (indent * _depth) + close


def write_json_atomic(path: Path, payload: Any) -> None:
    write_text_atomic(path, json_text(payload) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # no inode: a full disk
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; artifacts are ordinary files
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if DiskFullError.is_disk_full(error) and not isinstance(error, DiskFullError):
            raise DiskFullError(path, len(data)) from error
        raise
