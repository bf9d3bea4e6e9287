"""`edgeprune fit`: prune, quantize, export and benchmark until the artifact fits the device's budget."""

import argparse
import json
from pathlib import Path

from edgeprune.cli.common import EXIT_BUDGET, EXIT_OK, positive_mb, task_from
from edgeprune.errors import UserInputError


def add_parsers(verbs: argparse._SubParsersAction) -> None:
    fit = verbs.add_parser("fit", help="prune, quantize, export and benchmark until the artifact fits the budget")
    fit.add_argument("--device", default="host", help="device profile name or path to a .toml (default: host)")
    fit.add_argument("--max-mb", type=positive_mb, help="artifact size budget in MB (default: the profile's)")
    fit.add_argument("--task", default="minilm-bbc", help="bundled task (default: minilm-bbc)")
    fit.add_argument("--model", type=Path, help="a BERT-like model folder to use instead of the bundled MiniLM")
    fit.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")
    fit.add_argument("--runtime", choices=["executorch", "litert"], help="default: the device profile's runtime")
    fit.add_argument("--recipe", action="append", help="quantization recipe to use (repeat for a ladder; "
                     "default: the runtime's ladder, highest fidelity first)")
    fit.add_argument("--trim-vocab", action="store_true",
                     help="keep only the embedding rows of tokens the task's data uses; ships vocabulary.json")
    fit.add_argument("--criterion", default="taylor-output-proj", help="head importance criterion")
    fit.add_argument("--scoring-examples", type=int, default=256, help="calibration documents for scoring")
    fit.add_argument("--max-length", type=int, default=128, help="tokens per input (default: 128)")
    fit.add_argument("--json", action="store_true", help="print result.json to stdout")
    fit.add_argument("--quiet", action="store_true", help="no progress on stderr")

    fit.set_defaults(run=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from edgeprune.devices import load_profile
    from edgeprune.importance import CRITERIA
    from edgeprune.quantize import recipe_for_runtime
    from edgeprune.search.budget import Budget
    from edgeprune.search.fit import FitOptions, fit
    from edgeprune.serialization import to_jsonable

    profile = load_profile(args.device)  # validate cheap things before any heavy work
    CRITERIA.get(args.criterion)
    runtime = args.runtime or profile.runtime
    for name in args.recipe or ():
        recipe_for_runtime(name, runtime)
    if args.scoring_examples < 1:
        raise UserInputError(f"--scoring-examples must be at least 1, got {args.scoring_examples}")
    task = task_from(args)
    budget = Budget(max_mb=args.max_mb if args.max_mb is not None else profile.max_mb)
    options = FitOptions(criterion=args.criterion, scoring_examples=args.scoring_examples, runtime=runtime,
                         recipes=tuple(args.recipe) if args.recipe else None, trim_vocabulary=args.trim_vocab)
    result = fit(task, profile, budget, args.out, options, task.progress)
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2))
    else:
        print(f"{result.message}\nwrote {result.out_dir}/{result.fitted.path}, result.json, report.md")
    if not result.fits:
        return EXIT_BUDGET
    return EXIT_OK
