"""Shared pieces of the verbs: the one-line-error parser, exit codes, argument types, JSON input."""

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from edgeprune.errors import UserInputError

EXIT_OK, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3
T = TypeVar("T")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        sys.stderr.write(f"edgeprune: error: {message} (see edgeprune {self.prog.split()[-1]} --help)\n")
        raise SystemExit(EXIT_USAGE)


def positive_mb(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of megabytes, e.g. 30 or 12.5") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of megabytes, e.g. 30")
    return value


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="minilm-bbc", help="bundled task (default: minilm-bbc)")
    parser.add_argument("--model", type=Path, help="a model folder instead of the bundled MiniLM")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per input (default: 128)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def task_from(args: argparse.Namespace):  # noqa: ANN201 - a TextClassificationTask
    from edgeprune.progress import Progress
    from edgeprune.tasks import bundled_task

    if args.model is not None and not args.model.exists():
        raise UserInputError(f"model path {args.model} does not exist")
    return bundled_task(args.task, model_path=args.model, max_length=args.max_length,
                        progress=Progress(enabled=not args.quiet))


def parse_json(build: Callable[[dict], T], data: dict, path: Path) -> T:
    try:
        return build(data)
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, UserInputError):
            raise
        raise UserInputError(f"{path} does not hold what edgeprune wrote ({type(error).__name__}: {error})") from None


def read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserInputError(f"{what} file {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UserInputError(f"{what} file {path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{what} file {path} must hold a JSON object")
    return data
