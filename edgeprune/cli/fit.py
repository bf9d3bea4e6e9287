"""`edgeprune fit`: prune, quantize, export and benchmark until the artifact meets every budget of the device."""

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from edgeprune.cli.common import (
    EXIT_BUDGET,
    EXIT_OK,
    RepeatedFlag,
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
    fit.add_argument("--device", action=RepeatedFlag, help="device profile name or path to a .toml (default: host); "
                     "repeat for a fleet: one fit per device, the device-independent work done once, "
                     "a folder per device and fleet.html (`fleet = [...]` and [fit.budgets.DEVICE] in edgeprune.toml)")
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
    fit.add_argument("--recipe", action=RepeatedFlag, help="quantization recipe to use (repeat for a ladder; default: "
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
    lab = fit.add_argument_group("a lab on Ray (pip install 'edgeprune[cluster]')")
    lab.add_argument("--boards", type=Path, metavar="TOML", help="the lab's boards ([[board]]: name, profile, "
                     "connection, node_resource); a device with boards here is benchmarked on them, one artifact at "
                     "a time per board, another board of its profile taking over from one that stops answering")
    lab.add_argument("--ray", metavar="ADDRESS", help="run on this Ray cluster (its head's HOST:PORT, or auto to "
                     "start one on this machine; default with --boards: $RAY_ADDRESS): the boards' actors, and the "
                     "exports of the candidates ranked next, started on its workers while one is measured")
    lab.add_argument("--exports-ahead", type=int, default=2, metavar="N",
                     help="with --ray: how many exports may run ahead on the cluster (default: 2; 0: none)")

    fit.set_defaults(run=run_fit, device_budgets={})


def run_fit(args: argparse.Namespace) -> int:
    from edgeprune.devices import load_profile
    from edgeprune.importance import CRITERIA
    from edgeprune.quantize import recipe_for_runtime
    from edgeprune.search.fit import FitOptions, fit_task
    from edgeprune.serialization import to_jsonable

    devices = args.device or ["host"]
    profiles = [load_profile(device) for device in devices]  # validate cheap things before any heavy work
    names = [each.name for each in profiles]
    if len(set(names)) != len(names):
        raise UserInputError(f"a device appears twice in the fleet: {', '.join(names)}")
    if len(profiles) > 1 and any((args.ssh, args.adb, args.adb_port, args.identity, args.trust_on_first_use)):
        raise UserInputError("--ssh, --adb, --identity and --trust-on-first-use describe one device's connection; "
                             "in a fleet each device's profile ([connection]) says how to reach it")
    profile = dataclasses.replace(profiles[0], endpoint=endpoint_from(profiles[0], args))
    CRITERIA.get(args.criterion)
    for each in profiles:
        for name in args.recipe or ():
            recipe_for_runtime(name, args.runtime or each.runtime)
    # one device: its runtime, named (as before fleets); a fleet: each device's own unless --runtime says
    runtime = args.runtime or (profile.runtime if len(profiles) == 1 else None)
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
    lab = lab_boards(args)  # the boards file is checked before any heavy work, like the profiles
    limits = dict(max_mb=args.max_mb, max_memory_mb=args.max_memory_mb, max_latency_ms=args.max_latency_ms,
                  max_energy_mj=args.max_energy_mj, min_quality=args.min_quality,
                  latency_percentile=args.latency_percentile)
    budgets = fleet_budgets(profiles, limits, args.device_budgets)
    task = task_from(args)
    options = FitOptions(criterion=args.criterion, normalize=args.normalize, compensate=not args.no_compensation,
                         scoring_examples=args.scoring_examples, runtime=runtime,
                         recipes=tuple(args.recipe) if args.recipe else None, trim_vocabulary=args.trim_vocab,
                         recover_steps=args.recover_steps, ffn_fractions=args.ffn_fractions,
                         layer_removals=args.layer_removals, require_device=args.require_device,
                         quality_tolerance=args.quality_tolerance)
    out = args.resume if args.resume is not None else args.out
    ahead = args.exports_ahead if args.ray else 0
    with lab_pool(lab, args.ray, task.progress) as boards:
        if len(profiles) > 1:
            return run_fleet(task, profiles, budgets, out, options, args, boards, ahead)
        result = fit_task(task, profile, budgets[profile.name], out, options, task.progress,
                          resume=args.resume is not None, boards=boards, exports_ahead=ahead)
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2))
    else:
        print(f"{result.message}\nwrote {result.out_dir}/{result.fitted.path}, result.json, report.md")
    if not result.fits:
        return EXIT_BUDGET
    return EXIT_OK


def fleet_budgets(profiles: list, limits: dict, per_device: dict[str, dict]) -> dict:  # noqa: ANN001 - profiles
    """Each device's budget: its profile's, under the flags (or the project file's keys), under the project file's
    [fit.budgets.DEVICE] table for that device."""
    from edgeprune.search.budget import Budget

    names = {profile.name for profile in profiles}
    strangers = sorted(set(per_device) - names)
    if strangers:
        raise UserInputError(f"[fit.budgets] names {', '.join(strangers)}, not a device of this fit "
                             f"({', '.join(sorted(names))})")
    return {profile.name: Budget.for_device(profile, **{**limits, **per_device.get(profile.name, {})})
            for profile in profiles}


def run_fleet(task, profiles: list, budgets: dict, out: Path | None, options,  # noqa: ANN001 - Task, FitOptions
              args: argparse.Namespace, boards, ahead: int) -> int:  # noqa: ANN001 - BoardPool or None
    from edgeprune.search.fleet import fit_fleet
    from edgeprune.serialization import to_jsonable

    result = fit_fleet(task, profiles, budgets, out, options, task.progress, resume=args.resume is not None,
                       boards=boards, exports_ahead=ahead)
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2))
    else:
        for member in result.members:
            print(f"{member.device}: {member.status}: {member.message}")
        print(f"wrote {result.out_dir}/fleet.html, fleet.json and a folder per device")
    return EXIT_OK if result.fits else EXIT_BUDGET


def lab_boards(args: argparse.Namespace) -> list | None:
    """The boards of --boards, checked (None without --boards)."""
    if args.exports_ahead < 0:
        raise UserInputError(f"--exports-ahead must be 0 or more, got {args.exports_ahead}")
    if args.ray is None and args.boards is None:
        return None
    from edgeprune.extras import require_extra

    require_extra("cluster", "a lab on Ray (--ray, --boards)")
    if args.boards is None:
        return None
    from edgeprune.cluster.boards import load_boards

    return load_boards(args.boards)


@contextlib.contextmanager
def lab_pool(boards: list | None, address: str | None, progress):  # noqa: ANN001, ANN201 - yields a BoardPool
    """Connected to the Ray cluster at `address` (with --ray or --boards), the pool of `boards` (None without),
    closed, and a Ray started here stopped, afterwards."""
    if boards is None and address is None:
        yield None
        return
    from edgeprune.cluster import BoardPool, connect_ray

    started = connect_ray(address)
    try:
        if boards is None:
            yield None
            return
        with BoardPool(boards, progress) as pool:
            yield pool
    finally:
        if started:
            import ray

            ray.shutdown()
