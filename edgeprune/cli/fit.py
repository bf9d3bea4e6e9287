"""`edgeprune fit`: prune, quantize, export and benchmark until the artifact meets every budget of the device."""

import argparse
import dataclasses
import json
from pathlib import Path

from edgeprune.cli.common import (
    EXIT_BUDGET,
    EXIT_OK,
    add_task_arguments,
    check_output_folder,
    min_quality,
    number_list,
    positive,
    positive_mb,
    task_from,
)
from edgeprune.cli.devices import add_connection_arguments, endpoint_from
from edgeprune.errors import UserInputError
from edgeprune.export import RUNTIMES
from edgeprune.quantize import RECIPES


def add_parsers(verbs: argparse._SubParsersAction) -> None:
    fit = verbs.add_parser("fit", help="prune, quantize, export and benchmark until the artifact meets the budgets")
    fit.add_argument("--device", default="host", help="device profile name or path to a .toml (default: host)")
    add_connection_arguments(fit)
    budgets = fit.add_argument_group("budgets (default: the device profile's; flags override)")
    budgets.add_argument("--max-mb", type=positive_mb, help="artifact file size in MB")
    budgets.add_argument("--max-memory-mb", type=positive("megabytes", "512"),
                         help="peak memory of the running artifact in MB")
    budgets.add_argument("--max-latency-ms", type=positive("milliseconds", "40"),
                         help="latency per inference (batch 1) in ms")
    budgets.add_argument("--latency-percentile", type=int, choices=[50, 90, 99], default=50,
                         help="which latency percentile the budget limits (default: 50)")
    budgets.add_argument("--max-energy-mj", type=positive("millijoules", "200"), help="energy per inference in mJ")
    budgets.add_argument("--min-quality", type=min_quality,
                         help="quality floor in the task's metric (e.g. 0.95) or relative to the dense model (-1%%)")
    add_task_arguments(fit)
    fit.add_argument("--out", type=Path, help="output folder (default: a new folder under runs/)")
    fit.add_argument("--resume", type=Path, metavar="DIR", help="continue an interrupted fit into DIR")
    fit.add_argument("--runtime", choices=RUNTIMES.names(), help="default: the device profile's runtime")
    fit.add_argument("--recipe", action="append", help="quantization recipe to use (repeat for a ladder; default: "
                     f"the runtime's ladder, highest fidelity first): {', '.join(RECIPES.names())}")
    vocabulary = fit.add_mutually_exclusive_group()
    vocabulary.add_argument("--trim-vocab", dest="trim_vocab", action="store_const", const=True,
                            help="always keep only the embedding rows of tokens the task's data uses (ships "
                            "vocabulary.json); default: the search tries both")
    vocabulary.add_argument("--no-trim-vocab", dest="trim_vocab", action="store_const", const=False,
                            help="never trim the vocabulary")
    fit.add_argument("--ffn-fractions", type=number_list(float, "0,0.25,0.5"), default=(0.0, 0.25, 0.5),
                     metavar="F,F", help="FFN neuron fractions the search may remove per layer (default: 0,0.25,0.5; "
                     "0 turns FFN removal off)")
    fit.add_argument("--layer-removals", type=number_list(int, "0,1,2"), default=(0, 1, 2), metavar="N,N",
                     help="numbers of whole layers the search may remove (default: 0,1,2; 0 turns it off)")
    fit.add_argument("--quality-tolerance", type=float, metavar="Q",
                     help="validation qualities this close are a tie, won by the less compressed candidate "
                     "(default: one standard error of the dense model's validation accuracy; 0 for other metrics)")
    fit.add_argument("--require-device", action="store_true",
                     help="exit 5 when the device is unreachable instead of fitting on estimated figures")
    fit.add_argument("--criterion", default="fluctuation", help="head importance criterion (default: fluctuation)")
    fit.add_argument("--normalize", choices=["none", "l2", "zscore"], default="none",
                     help="per-layer normalization of the scores (default: none)")
    fit.add_argument("--no-compensation", action="store_true",
                     help="remove heads outright instead of folding their mean outputs into the output bias")
    fit.add_argument("--scoring-examples", type=int, default=256, help="calibration examples for scoring")
    fit.add_argument("--recover-steps", type=int, default=0,
                     help="distil each pruned candidate from the dense teacher for N steps (default: 0, off)")
    fit.add_argument("--json", action="store_true", help="print result.json to stdout")

    fit.set_defaults(run=run_fit)


def run_fit(args: argparse.Namespace) -> int:
    from edgeprune.devices import load_profile
    from edgeprune.importance import CRITERIA
    from edgeprune.quantize import recipe_for_runtime
    from edgeprune.search.budget import Budget
    from edgeprune.search.fit import FitOptions, fit_task
    from edgeprune.serialization import to_jsonable

    profile = load_profile(args.device)  # validate cheap things before any heavy work
    profile = dataclasses.replace(profile, endpoint=endpoint_from(profile, args))
    CRITERIA.get(args.criterion)
    runtime = args.runtime or profile.runtime
    for name in args.recipe or ():
        recipe_for_runtime(name, runtime)
    if args.scoring_examples < 1:
        raise UserInputError(f"--scoring-examples must be at least 1, got {args.scoring_examples}")
    if args.recover_steps < 0:
        raise UserInputError(f"--recover-steps must be at least 0 (0: no recovery), got {args.recover_steps}")
    if args.quality_tolerance is not None and not 0 <= args.quality_tolerance < 1:
        raise UserInputError(f"--quality-tolerance must be at least 0 and under 1 (in the task metric's units), got "
                             f"{args.quality_tolerance}")
    if args.resume is not None and args.out is not None and args.resume != args.out:
        raise UserInputError("--resume DIR continues the fit that was writing to DIR; leave out --out")
    if args.resume is None and args.out is not None:
        check_output_folder(args.out)  # before the task is built: a bad --out costs nothing
    budget = Budget.for_device(profile, max_mb=args.max_mb, max_memory_mb=args.max_memory_mb,
                               max_latency_ms=args.max_latency_ms, max_energy_mj=args.max_energy_mj,
                               min_quality=args.min_quality, latency_percentile=args.latency_percentile)
    task = task_from(args)
    options = FitOptions(criterion=args.criterion, normalize=args.normalize, compensate=not args.no_compensation,
                         scoring_examples=args.scoring_examples, runtime=runtime,
                         recipes=tuple(args.recipe) if args.recipe else None, trim_vocabulary=args.trim_vocab,
                         recover_steps=args.recover_steps, ffn_fractions=args.ffn_fractions,
                         layer_removals=args.layer_removals, require_device=args.require_device,
                         quality_tolerance=args.quality_tolerance)
    out = args.resume if args.resume is not None else args.out
    result = fit_task(task, profile, budget, out, options, task.progress, resume=args.resume is not None)
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2))
    else:
        print(f"{result.message}\nwrote {result.out_dir}/{result.fitted.path}, result.json, report.md")
    if not result.fits:
        return EXIT_BUDGET
    return EXIT_OK
