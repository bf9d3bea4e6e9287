"""The `edgeprune` command: verbs that mirror the Python API. Status on stderr, results on stdout."""

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from edgeprune.errors import EdgepruneError, UserInputError

EXIT_OK, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3
T = TypeVar("T")


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

    score = verbs.add_parser("score", help="score every attention head on the task's calibration data")
    _add_task_arguments(score)
    score.add_argument("--criterion", default="taylor", help="head importance criterion (default: taylor)")
    score.add_argument("--examples", type=int, default=256, help="calibration documents to score on")
    score.add_argument("--out", type=Path, required=True, help="where to write the scores as JSON")

    prune = verbs.add_parser("prune", help="remove heads for real and save the smaller model")
    prune.add_argument("--model", type=Path, help="the model folder to prune (default: the bundled MiniLM)")
    source = prune.add_mutually_exclusive_group(required=True)
    source.add_argument("--scores", type=Path, help="scores JSON written by `edgeprune score`")
    source.add_argument("--plan", type=Path, help="a plan JSON to apply as it is")
    prune.add_argument("--strategy", default="global-topk", choices=["global-topk", "per-layer", "threshold"])
    prune.add_argument("--remove", type=int, help="global-topk: heads to remove in all")
    prune.add_argument("--remove-per-layer", type=int, help="per-layer: heads to remove from each layer")
    prune.add_argument("--threshold", type=float, help="threshold: remove heads scoring below this")
    prune.add_argument("--quantile", type=float, help="threshold: remove heads below this quantile (0..1)")
    prune.add_argument("--min-heads-per-layer", type=int, default=1)
    prune.add_argument("--heads-multiple", type=int, default=1, help="round kept heads per layer up to a multiple")
    prune.add_argument("--no-normalize", action="store_true", help="do not normalize scores per layer first")
    prune.add_argument("--plan-out", type=Path, help="where to write the plan JSON (default: OUT/plan.json)")
    prune.add_argument("--out", type=Path, required=True, help="folder for the pruned model")

    devices = verbs.add_parser("devices", help="device profiles")
    devices.add_argument("action", choices=["list", "show"])
    devices.add_argument("name", nargs="?")
    return parser


def _add_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default="minilm-bbc", help="bundled task (default: minilm-bbc)")
    parser.add_argument("--model", type=Path, help="a BERT-like model folder instead of the bundled MiniLM")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per input (default: 128)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run_score(args: argparse.Namespace) -> int:
    from edgeprune.importance import CRITERIA, score_heads
    from edgeprune.progress import Progress
    from edgeprune.serialization import write_json_atomic
    from edgeprune.tasks import bundled_task

    CRITERIA.get(args.criterion)
    if args.model is not None and not args.model.exists():
        raise UserInputError(f"model path {args.model} does not exist")
    if args.examples < 1:
        raise UserInputError(f"--examples must be at least 1, got {args.examples}")
    progress = Progress(enabled=not args.quiet)
    task = bundled_task(args.task, model_path=args.model, max_length=args.max_length, progress=progress)
    teacher = task.teacher()
    with progress.task(f"scoring heads ({args.criterion})", args.examples) as bar:
        scores = score_heads(teacher.model, bar.track(task.batches("calibration", 16, limit=args.examples)),
                             args.criterion)
    write_json_atomic(args.out, scores.to_dict())
    print(f"wrote {args.out}: {scores.scores.shape[0]} layers x {scores.scores.shape[1]} heads, "
          f"criterion {scores.criterion}, {scores.num_examples} examples")
    return EXIT_OK


def run_prune(args: argparse.Namespace) -> int:
    from edgeprune.importance import HeadScores
    from edgeprune.models.io import load, save
    from edgeprune.pruning import Constraints, PruningPlan, apply_plan, plan_global_topk, plan_per_layer, plan_threshold
    from edgeprune.serialization import write_json_atomic
    from edgeprune.tasks import minilm_model_path

    model_path = args.model or minilm_model_path()
    if not model_path.exists():
        raise UserInputError(f"model path {model_path} does not exist")
    if args.out.exists() and any(args.out.iterdir()):
        raise UserInputError(f"output folder {args.out} already exists and is not empty; choose another --out")
    if args.plan is not None:
        plan = _parse(PruningPlan.from_dict, _read_json(args.plan, "plan"), args.plan)
    else:
        scores = _parse(HeadScores.from_dict, _read_json(args.scores, "scores"), args.scores)
        if not args.no_normalize:
            scores = scores.normalize_per_layer()
        constraints = Constraints(args.min_heads_per_layer, args.heads_multiple)
        if args.strategy == "global-topk":
            if args.remove is None:
                raise UserInputError("global-topk needs --remove N (heads to remove in all)")
            plan = plan_global_topk(scores, args.remove, constraints=constraints)
        elif args.strategy == "per-layer":
            if args.remove_per_layer is None:
                raise UserInputError("per-layer needs --remove-per-layer K")
            plan = plan_per_layer(scores, args.remove_per_layer, constraints)
        else:
            plan = plan_threshold(scores, args.threshold, args.quantile, constraints)
    model = apply_plan(load(model_path), plan)
    write_json_atomic(args.plan_out or args.out / "plan.json", plan.to_dict())
    save(model, args.out)
    print(f"removed {plan.heads_removed} of {sum(plan.num_heads)} heads; wrote {args.out}")
    return EXIT_OK


def _parse(build: Callable[[dict], T], data: dict, path: Path) -> T:
    try:
        return build(data)
    except (KeyError, TypeError, ValueError) as error:
        if isinstance(error, UserInputError):
            raise
        raise UserInputError(f"{path} does not hold what edgeprune wrote ({type(error).__name__}: {error})") from None


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserInputError(f"{what} file {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UserInputError(f"{what} file {path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{what} file {path} must hold a JSON object")
    return data


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
        print(f"{result.message}\nwrote {result.out_dir}/{result.fitted.path}, result.json, report.md")
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
        verbs = {"fit": run_fit, "score": run_score, "prune": run_prune, "devices": run_devices}
        return verbs[args.verb](args)
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
