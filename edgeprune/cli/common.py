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


def number_list(kind: type, example: str) -> Callable[[str], tuple]:
    """An argument type for comma-separated numbers, e.g. 0,0.25,0.5."""
    def parse(text: str) -> tuple:
        try:
            return tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers, e.g. "
                                             f"{example}") from None

    parse.__name__ = "list"
    return parse


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


def split_ratios(text: str):  # noqa: ANN201 - a SplitRatios
    from edgeprune.data import SplitRatios

    try:
        return SplitRatios.parse(text)
    except UserInputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def task_from(args: argparse.Namespace):  # noqa: ANN201 - a Task
    """The task the arguments describe: the bundled one, or the team's model and data."""
    from edgeprune.data import SplitRatios
    from edgeprune.progress import Progress
    from edgeprune.tasks import BUNDLED_TASKS, TASKS, bundled_task, make_task

    if args.model is not None and not args.model.exists():
        raise UserInputError(f"model path {args.model} does not exist")
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
