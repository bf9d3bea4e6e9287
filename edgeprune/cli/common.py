"""Shared pieces of the verbs: exit codes, option types and groups, output checks, JSON input."""

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import click

from edgeprune.errors import UserInputError

EXIT_OK, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3
T = TypeVar("T")


class Parsed(click.ParamType):
    """A click type from a parse function that raises ValueError with a message for the user.

    Values that are not text (a default, a TOML number or list from the project file) are read as their text, so
    every source of a value is checked by the same function."""

    def __init__(self, parse: Callable[[str], Any], name: str) -> None:
        self.parse, self.name = parse, name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list | tuple):
            value = ",".join(map(str, value))
        try:
            return self.parse(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


def positive(unit: str, example: str) -> Parsed:
    """A positive, finite number of `unit`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number of {unit}, e.g. {example}") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{text!r} must be a positive number of {unit}, e.g. {example}")
        return value

    return Parsed(parse, unit)


positive_mb = positive("megabytes", "30")


def parse_finite(text: str) -> float:
    """Any finite number (nan, inf and numbers beyond a double are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} must be a finite number")
    return value


finite = Parsed(parse_finite, "number")


def parse_min_quality(text: str) -> float | str:
    """An absolute floor in the task's metric (0.95) or a drop relative to the dense teacher (-1%)."""
    stripped = text.strip()
    if stripped.endswith("%"):
        try:
            drop = float(stripped[:-1])
        except ValueError:
            drop = math.nan
        if not math.isfinite(drop) or not 0 <= -drop <= 100:
            raise ValueError(f"{text!r} must be a relative drop from 0% to -100%, like -1%")
        return stripped
    try:
        return parse_finite(stripped)
    except ValueError:
        raise ValueError(f"{text!r} must be a finite number like 0.95 or a relative drop like -1%") from None


min_quality = Parsed(parse_min_quality, "quality")


def number_list(kind: type, example: str) -> Parsed:
    """Comma-separated finite numbers, e.g. 0,0.25,0.5."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a comma-separated list of numbers, e.g. {example}") from None
        if not values or not all(math.isfinite(value) for value in values):
            raise ValueError(f"{text!r} must list finite numbers, e.g. {example}")
        return values

    return Parsed(parse, "list")


def options(*decorators: Callable) -> Callable:
    """Several click options as one decorator, in the order they are listed (help shows them so)."""
    def apply(command: Callable) -> Callable:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


# Taken out of the arguments before click parses them (edgeprune.cli.main), so that they work before or after the
# verb; declared on every verb only so that its --help lists them.
output_options = options(
    click.option("--quiet", is_flag=True, expose_value=False, help="no progress on stderr, only errors and warnings "
                 "about the result"),
    click.option("--verbose", is_flag=True, expose_value=False, help="also show what the libraries underneath log "
                 "(transformers, torchao, ...)"),
    click.option("--debug", is_flag=True, expose_value=False, help="on an error, show its traceback instead of one "
                 "line"),
)


def as_args(values: dict[str, Any]) -> SimpleNamespace:
    """A verb's parsed options as attributes, with the global --quiet (taken out before click parses)."""
    from edgeprune.progress import VERBOSITY

    return SimpleNamespace(**values, quiet=VERBOSITY.quiet)


def epilog(examples: list[str], exit_codes: str) -> str:
    """A help epilog that click prints as written: examples, then the verb's exit codes."""
    lines = "\n".join(f"  {example}" for example in examples)
    return f"\b\nExamples:\n{lines}\n\nExit codes: {exit_codes}"


def one_line(text: object) -> str:
    """A message on one line: line breaks of wrapped or multi-line messages become ' | '."""
    return " | ".join(line.strip() for line in str(text).splitlines() if line.strip())


def task_options(model_help: str | None = None) -> Callable:
    """The options that say which model and data a verb works on (the bundled task by default)."""
    from edgeprune.data import FORMATS
    from edgeprune.tasks import BUNDLED_TASKS, TASKS

    kinds = ", ".join(TASKS.names())
    return options(
        click.option("--task", help=f"a task kind with --data ({kinds}; default: classification) or a bundled task "
                     f"(default: {BUNDLED_TASKS[0]})"),
        click.option("--model", type=click.Path(path_type=Path), help=model_help or "a Hugging Face model folder, or "
                     "a model id in the local Hugging Face cache (default: the bundled MiniLM)"),
        click.option("--data", type=click.Path(path_type=Path), help="your data: a CSV or JSONL file, a folder with "
                     "one sub-folder of .txt or image files per label, or a datasets save_to_disk folder"),
        click.option("--data-format", type=click.Choice(FORMATS.names()), help="the data's format (default: told "
                     "from the path)"),
        click.option("--text-column", default="text", show_default=True, help="CSV/JSONL column holding the text"),
        click.option("--label-column", default="label", show_default=True, help="CSV/JSONL column holding the label"),
        click.option("--head", default="auto", show_default=True, type=click.Choice(["auto", "model", "fit"]),
                     help="classification head: the model's own (model), a linear head fitted on the encoder (fit), "
                     "or the model's own when it has one (auto)"),
        click.option("--split", type=Parsed(split_ratios, "ratios"), help="calibration,validation,test ratios "
                     "(default: 0.55,0.15,0.30)"),
        click.option("--seed", type=int, default=0, show_default=True, help="seed of the data split"),
        click.option("--max-length", type=int, default=128, show_default=True, help="tokens per input"),
        click.option("--context", type=int, help="causal-lm: the KV cache's length, prompt plus generated tokens, "
                     "the artifact is built for (default: 512 within the model's positions, at least --max-length)"),
        click.option("--attention", type=click.Choice(["auto", "portable", "fast"]), help="causal-lm: the program's "
                     "attention: ExecuTorch's LLM kernels (fast) or aten ops any runtime runs (portable); auto: fast "
                     "unless a device's native runner times it  [default: auto]"),
    )


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
    import tempfile

    try:
        handle, name = tempfile.mkstemp(dir=folder, prefix=".edgeprune-write-test-")
    except OSError as error:
        raise UserInputError(f"{flag} {path} cannot be written ({error.strerror or error} in {folder}); choose a "
                             "writable place") from None
    os.close(handle)
    os.unlink(name)


def split_ratios(text: str):  # noqa: ANN201 - a SplitRatios
    from edgeprune.data import SplitRatios

    return SplitRatios.parse(text)  # a UserInputError is a ValueError: Parsed reports it as click does


def task_from(args: SimpleNamespace):  # noqa: ANN201 - a Task
    """The task the arguments describe: the bundled one, or the team's model and data, with its inputs checked."""
    task = build_task(args)
    from edgeprune.tasks.base import check_inputs
    check_inputs(task)  # data, labels and tokenizer: bad input fails here, before any model is loaded
    return task


def build_task(args: SimpleNamespace):  # noqa: ANN201 - a Task
    from edgeprune.data import SplitRatios
    from edgeprune.models.hub import model_folder
    from edgeprune.progress import Progress
    from edgeprune.tasks import BUNDLED_TASKS, TASKS, bundled_task, make_task

    if args.model is not None:  # a folder, or a Hugging Face model id in the local cache (resolved offline)
        args.model = model_folder(args.model)
    progress = Progress(enabled=not args.quiet)
    quiet_libraries(args)
    data = getattr(args, "data", None)
    ratios = getattr(args, "split", None) or SplitRatios()
    if data is None:
        name = args.task or BUNDLED_TASKS[0]
        if name in TASKS.names():
            raise UserInputError(f"task {name} needs your data: add --data FILE_OR_FOLDER (and --model FOLDER)")
        extra = context_option(args, "causal-lm" if name == "smollm2-bbc" else name)
        return bundled_task(name, model_path=args.model, max_length=args.max_length, progress=progress,
                            ratios=ratios, seed=getattr(args, "seed", 0), **extra)
    kind = args.task or "classification"
    if kind in BUNDLED_TASKS:
        raise UserInputError(f"--data goes with a task kind ({', '.join(TASKS.names())}), not the bundled {kind}")
    if args.model is None:
        raise UserInputError("--data needs --model: the Hugging Face model folder to fit to your data")
    extra = context_option(args, kind)
    return make_task(kind, args.model, data, text_column=args.text_column, label_column=args.label_column,
                     data_format=args.data_format, max_length=args.max_length, ratios=ratios, seed=args.seed,
                     head=args.head, progress=progress, **extra)


def quiet_libraries(args: SimpleNamespace) -> None:
    """With --quiet, the libraries' own progress bars too (transformers', as it reads a GGUF file or a dataset)."""
    if getattr(args, "quiet", False):
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def context_option(args: SimpleNamespace, kind: str) -> dict[str, Any]:
    """`--context`, `--attention` (and fit's `--prompt-tokens`) for the task's constructor: only a causal-lm
    generator has a KV cache and a prompt."""
    given = {name: getattr(args, name, None) for name in ("context", "attention", "prompt_tokens")}
    given = {name: value for name, value in given.items() if value is not None}
    if given and kind != "causal-lm":
        flag = next(iter(given))
        what = "prompt" if flag == "prompt_tokens" else "KV cache"
        raise UserInputError(f"--{flag.replace('_', '-')} sets a causal-lm generator's {what}; task {kind} has none")
    return given


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
