"""The `edgeprune` command: verbs that mirror the Python API. Status on stderr, results on stdout."""

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from edgeprune.errors import EdgepruneError, UserInputError

EXIT_OK, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3


class _Parser(argparse.ArgumentParser):
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="edgeprune", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    fit = verbs.add_parser("fit", help="prune, quantize, export and benchmark until the artifact fits the budget")
    fit.add_argument("--device", default="host", help="device profile name or path to a .toml (default: host)")
    fit.add_argument("--max-mb", type=positive_mb, help="artifact size budget in MB (default: the profile's)")
    fit.add_argument("--task", default="minilm-bbc", help="bundled task (default: minilm-bbc)")
    fit.add_argument("--model", type=Path, help="a BERT-like model folder to use instead of the bundled MiniLM")
    fit.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")
    fit.add_argument("--criterion", default="gate-gradient", help="head importance criterion")
    fit.add_argument("--scoring-examples", type=int, default=256, help="calibration documents for scoring")
    fit.add_argument("--max-length", type=int, default=128, help="tokens per input (default: 128)")
    fit.add_argument("--json", action="store_true", help="print result.json to stdout")
    fit.add_argument("--quiet", action="store_true", help="no progress on stderr")

    devices = verbs.add_parser("devices", help="device profiles")
    devices.add_argument("action", choices=["list", "show"])
    devices.add_argument("name", nargs="?")
    return parser


def run_fit(args: argparse.Namespace) -> int:
    from edgeprune.devices import load_profile
    from edgeprune.importance import CRITERIA
    from edgeprune.progress import Progress
    from edgeprune.search.budget import Budget
    from edgeprune.search.fit import FitOptions, fit
    from edgeprune.serialization import to_jsonable
    from edgeprune.tasks import bundled_task

    profile = load_profile(args.device)  # validate cheap things before any heavy work
    CRITERIA.get(args.criterion)
    if args.model is not None and not args.model.exists():
        raise UserInputError(f"model path {args.model} does not exist")
    if args.scoring_examples < 1:
        raise UserInputError(f"--scoring-examples must be at least 1, got {args.scoring_examples}")
    progress = Progress(enabled=not args.quiet)
    task = bundled_task(args.task, model_path=args.model, max_length=args.max_length, progress=progress)
    budget = Budget(max_mb=args.max_mb if args.max_mb is not None else profile.max_mb)
    result = fit(task, profile, budget, args.out,
                 FitOptions(criterion=args.criterion, scoring_examples=args.scoring_examples), progress)
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2))
    else:
        print(f"{result.message}\nwrote {result.out_dir}/model.pte, result.json, report.md")
    if not result.fits:
        return EXIT_BUDGET
    return EXIT_OK


def run_devices(args: argparse.Namespace) -> int:
    from edgeprune.devices import known_devices, load_profile
    from edgeprune.serialization import to_jsonable

    if args.action == "list":
        for name in known_devices():
            profile = load_profile(name)
            print(f"{name}\t{profile.runtime}\t{profile.connection}\t{profile.description}")
        return EXIT_OK
    if not args.name:
        raise UserInputError("devices show needs a device name, e.g. edgeprune devices show host")
    print(json.dumps(to_jsonable(load_profile(args.name)), indent=2))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.verb == "fit":
            return run_fit(args)
        return run_devices(args)
    except EdgepruneError as error:
        if isinstance(error, UserInputError) or error.exit_code != 1:
            sys.stderr.write(f"edgeprune: error: {error}\n")
            return error.exit_code
        raise
    except KeyboardInterrupt:
        sys.stderr.write("edgeprune: interrupted; nothing was written to the output folder\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
