"""Shared pieces of the verbs: the one-line-error parser, exit codes, argument types, JSON input."""

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from edgeprune.errors import UserInputError

EXIT_OK, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3
T = TypeVar("T")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        sys.stderr.write(f"edgeprune: error: {message} (see edgeprune {self.prog.split()[-1]} --help)\n")
        raise SystemExit(EXIT_USAGE)


class RepeatedFlag(argparse._AppendAction):
    """A flag that may be repeated (`--device pi5 --device pi4`): the command line's values replace a list the
    project file gave, instead of being appended to it as argparse's own `append` does."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault("flags_given", set())
        if self.dest not in given:
            given.add(self.dest)
            setattr(namespace, self.dest, [])
        super().__call__(parser, namespace, values, option_string)


def positive(unit: str, example: str) -> Callable[[str], float]:
    """An argument type for a positive, finite number of `unit`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}, e.g. {example}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of {unit}, e.g. {example}")
        return value

    parse.__name__ = f"positive {unit}"
    return parse


positive_mb = positive("megabytes", "30")


def finite(text: str) -> float:
    """An argument type for any finite number (nan, inf and numbers beyond a double are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number")
    return value


def min_quality(text: str) -> float | str:
    """An absolute floor in the task's metric (0.95) or a drop relative to the dense teacher (-1%)."""
    stripped = text.strip()
    if stripped.endswith("%"):
        try:
            drop = float(stripped[:-1])
        except ValueError:
            drop = math.nan
        if not math.isfinite(drop) or not 0 <= -drop <= 100:
            raise argparse.ArgumentTypeError(f"{text!r} must be a relative drop from 0% to -100%, like -1%")
        return stripped
    try:
        return finite(stripped)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number like 0.95 or a relative drop like "
                                         "-1%") from None


def number_list(kind: type, example: str) -> Callable[[str], tuple]:
    """An argument type for comma-separated finite numbers, e.g. 0,0.25,0.5."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers, e.g. "
                                             f"{example}") from None
        if not values or not all(math.isfinite(value) for value in values):
            raise argparse.ArgumentTypeError(f"{text!r} must list finite numbers, e.g. {example}")
        return values

    parse.__name__ = "list"
    return parse


def non_finite_flag(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """The first option whose parsed value is a number that is not finite (nan, inf), as `--flag value`."""
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}
    for dest, value in vars(args).items():
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if isinstance(item, float) and not math.isfinite(item):
                return f"{flags.get(dest, dest)} {item}"
    return None


def one_line(text: object) -> str:
    """A message on one line: line breaks of wrapped or multi-line messages become ' | '."""
    return " | ".join(line.strip() for line in str(text).splitlines() if line.strip())


def add_task_arguments(parser: argparse.ArgumentParser, model_help: str | None = None) -> None:
    parser.add_argument("--task", help="a task kind with --data (classification, embedding, causal-lm, "
                        "image-classification; default: classification) or a bundled task (default: minilm-bbc)")
    parser.add_argument("--model", type=Path, help=model_help or "a Hugging Face model folder (default: the bundled "
                        "MiniLM)")
    parser.add_argument("--data", type=Path, help="your data: a CSV or JSONL file, or a folder with one sub-folder "
                        "of .txt or image files per label")
    parser.add_argument("--data-format", help="csv, jsonl, text-folder or image-folder (default: from the path)")
    parser.add_argument("--text-column", default="text", help="CSV/JSONL column holding the text (default: text)")
    parser.add_argument("--label-column", default="label", help="CSV/JSONL column holding the label (default: label)")
    parser.add_argument("--head", default="auto", choices=["auto", "model", "fit"],
                        help="classification head: the model's own (model), a linear head fitted on the encoder "
                        "(fit), or the model's own when it has one (auto)")
    parser.add_argument("--split", type=split_ratios, help="calibration,validation,test ratios (default: "
                        "0.55,0.15,0.30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data split (default: 0)")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per input (default: 128)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def check_output_file(path: Path, flag: str = "--out") -> None:
    """Refuse an output file that cannot be written: a folder in its place, a file above it, an unwritable folder.

    Nothing is created: the nearest existing folder above it is probed with a temporary file, removed at once.
    """
    if path.is_dir():
        raise UserInputError(f"{flag} {path} is a folder; name a file to write")
    _check_writable_above(path, flag)


def check_output_folder(path: Path, flag: str = "--out", empty: bool = True) -> None:
    """Refuse an output folder that is a file, holds files already (when `empty`), or cannot be created or written."""
    if path.exists() and not path.is_dir():
        raise UserInputError(f"{flag} {path} is a file; name a folder to write to")
    if path.is_dir():
        try:
            used = any(path.iterdir())
        except OSError as error:
            raise UserInputError(f"{flag} {path} cannot be read: {error.strerror or error}") from None
        if empty and used:
            raise UserInputError(f"output folder {path} already exists and is not empty; choose another {flag}")
        _probe(path, flag, path)
        return
    _check_writable_above(path, flag)


def _check_writable_above(path: Path, flag: str) -> None:
    parent = path.absolute().parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserInputError(f"{flag} {path} cannot be created: {parent} is a file, not a folder")
    _probe(parent, flag, path)


def _probe(folder: Path, flag: str, path: Path) -> None:
    try:
        handle, name = tempfile.mkstemp(dir=folder, prefix=".edgeprune-write-test-")
    except OSError as error:
        raise UserInputError(f"{flag} {path} cannot be written ({error.strerror or error} in {folder}); choose a "
                             "writable place") from None
    os.close(handle)
    os.unlink(name)


def split_ratios(text: str):  # noqa: ANN201 - a SplitRatios
    from edgeprune.data import SplitRatios

    try:
        return SplitRatios.parse(text)
    except UserInputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def task_from(args: argparse.Namespace):  # noqa: ANN201 - a Task
    """The task the arguments describe: the bundled one, or the team's model and data, with its inputs checked."""
    task = build_task(args)
    task.check_inputs()  # data, labels and tokenizer: bad input fails here, before any model is loaded
    return task


def build_task(args: argparse.Namespace):  # noqa: ANN201 - a Task
    from edgeprune.data import SplitRatios
    from edgeprune.models.hub import model_folder
    from edgeprune.progress import Progress
    from edgeprune.tasks import BUNDLED_TASKS, TASKS, bundled_task, make_task

    if args.model is not None:  # a folder, or a Hugging Face model id in the local cache (resolved offline)
        args.model = model_folder(args.model)
    progress = Progress(enabled=not args.quiet)
    if args.quiet:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    data = getattr(args, "data", None)
    ratios = getattr(args, "split", None) or SplitRatios()
    if data is None:
        name = args.task or BUNDLED_TASKS[0]
        if name in TASKS.names():
            raise UserInputError(f"task {name} needs your data: add --data FILE_OR_FOLDER (and --model FOLDER)")
        return bundled_task(name, model_path=args.model, max_length=args.max_length, progress=progress,
                            ratios=ratios, seed=getattr(args, "seed", 0))
    kind = args.task or "classification"
    if kind in BUNDLED_TASKS:
        raise UserInputError(f"--data goes with a task kind ({', '.join(TASKS.names())}), not the bundled {kind}")
    if args.model is None:
        raise UserInputError("--data needs --model: the Hugging Face model folder to fit to your data")
    return make_task(kind, args.model, data, text_column=args.text_column, label_column=args.label_column,
                     data_format=args.data_format, max_length=args.max_length, ratios=ratios, seed=args.seed,
                     head=args.head, progress=progress)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number edgeprune accepts")


def parse_json(build: Callable[[dict], T], data: dict, path: Path) -> T:
    try:
        return build(data)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
        if isinstance(error, UserInputError):
            raise
        raise UserInputError(f"{path} does not hold what edgeprune wrote ({type(error).__name__}: "
                             f"{one_line(error)})") from None


def read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"), parse_constant=_reject_constant)
    except FileNotFoundError:
        raise UserInputError(f"{what} file {path} does not exist") from None
    except IsADirectoryError:
        raise UserInputError(f"{what} file {path} is a folder; name the JSON file") from None
    except OSError as error:
        raise UserInputError(f"cannot read {what} file {path}: {error.strerror or error}") from None
    except (ValueError, RecursionError) as error:  # JSON syntax, NaN or Infinity, non-UTF-8 bytes, absurd nesting
        raise UserInputError(f"{what} file {path} is not valid JSON: {one_line(error)}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{what} file {path} must hold a JSON object")
    return data
