"""`edgeprune fit`: prune, quantize, export and benchmark until the artifact meets every budget of the device."""

import contextlib
import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import click

from edgeprune.cli.common import (
    EXIT_BUDGET,
    EXIT_OK,
    Parsed,
    as_args,
    check_output_folder,
    epilog,
    finite,
    min_quality,
    number_list,
    options,
    output_options,
    positive,
    positive_mb,
    task_from,
    task_options,
)
from edgeprune.cli.devices import connection_options, endpoint_from
from edgeprune.cli.recovery import GRID_RECIPES, PRECISIONS
from edgeprune.devices.transports import given_connection_flags
from edgeprune.errors import DeviceUnreachableError, UserInputError
from edgeprune.importance import CRITERIA
from edgeprune.quantize import RECIPES
from edgeprune.runtimes import RUNTIMES

AUTO, AUTO_RECOVER_STEPS = "auto", 150  # of edgeprune.search.options; parsing imports no torch
FFN_ALLOCATIONS, DEFAULT_FFN_ALLOCATION = ("uniform", "scored"), "uniform"  # of edgeprune.search.options, likewise
# the command as typed stays bounded (the Python API has no limit unless FitOptions.time_limit_minutes says so).
# `edgeprune fit --device host --max-mb 5` from a cold cache ended its search on its own in 6.2 minutes here
# (2 cores, 2026-12-04; docs/FINDINGS.md), so the limit cuts only searches longer than that one
DEFAULT_TIME_LIMIT_MINUTES = "8"


def parse_minutes_or_none(text: str) -> float | None:
    """A positive number of minutes, or none (no limit)."""
    return None if text.strip().lower() == "none" else positive("minutes", "15").parse(text)


minutes_or_none = Parsed(parse_minutes_or_none, "minutes")


def recover_steps(text: str) -> int | str:
    """auto, or a whole number of steps >= 0."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        steps = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither auto nor a whole number of steps, e.g. 150") from None
    if steps < 0:
        raise ValueError(f"{text!r} must be auto or at least 0 (0: no recovery)")
    return steps


def runtime_list(text: str) -> tuple[str, ...]:
    """executorch, litert, or both comma-separated (in the order of preference for the dense baseline)."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in RUNTIMES.names()]
    if not names or unknown:
        raise ValueError(f"{text!r}: name runtimes from {', '.join(RUNTIMES.names())}, comma-separated")
    return names


EXIT_CODES = ("0 every budget met; 2 bad input; 3 the budgets cannot be met (the closest candidate is still "
              "written); 4 an artifact failed verification; 5 the device is unreachable with --require-device; "
              "130 Ctrl-C (finished work kept for --resume)")


@click.command("fit", epilog=epilog([
    "edgeprune fit --device host --max-mb 30",
    "edgeprune fit --device pi5 --ssh pi@raspberrypi.local --max-mb 25 --max-latency-ms 40",
    "edgeprune fit --model my-bert/ --task classification --data reviews.csv --max-mb 25",
    "edgeprune fit --device pi5 --device pi4 --max-mb 40      # a fleet: OUT/pi5/, OUT/pi4/, fleet.html",
    "edgeprune fit --max-mb 12 --resume runs/fit-20261201-101500"], EXIT_CODES))
@click.option("--device", multiple=True, envvar="EDGEPRUNE_DEVICE", help="device profile name or path to a .toml "
              "(default: host; env EDGEPRUNE_DEVICE); repeat for a fleet: one fit per device, the device-independent "
              "work done once, a folder per device and fleet.html (`fleet = [...]` and [fit.budgets.DEVICE] in "
              "edgeprune.toml)")
@connection_options
@options(
    click.option("--max-mb", type=positive_mb, help="budget: artifact file size in MB (default: the profile's)"),
    click.option("--max-memory-mb", type=positive("megabytes", "512"),
                 help="budget: resident memory in MB, as --memory-measure says"),
    click.option("--memory-measure", type=click.Choice(["artifact", "process"]), default="artifact",
                 show_default=True, help="what --max-memory-mb limits: the memory loading and running the artifact "
                 "adds to its process (what an app pays), or the benchmark process's whole peak (a Python runner's "
                 "includes the interpreter and the runtime)"),
    click.option("--max-latency-ms", type=positive("milliseconds", "40"),
                 help="budget: latency per inference (batch 1) in ms"),
    click.option("--latency-percentile", type=click.Choice(["50", "90", "99"]), default="50", show_default=True,
                 help="which latency percentile the budget limits"),
    click.option("--max-energy-mj", type=positive("millijoules", "200"), help="budget: energy per inference in mJ"),
    click.option("--min-decode-tps", type=positive("tokens per second", "30"), help="budget, causal-lm: decode "
                 "speed of the generator in tokens/s, one token after a prompt of --max-length tokens (its time to "
                 "first token is --max-ttft-ms)"),
    click.option("--max-ttft-ms", type=positive("milliseconds", "300"), help="budget, causal-lm: time to first "
                 "token, the prefill of a --prompt-tokens prompt (p50)"),
    click.option("--prompt-tokens", type=int, help="causal-lm: the prompt --max-ttft-ms times, 1 to --max-length "
                 "tokens (the program's prefill length)  [default: --max-length]"),
    click.option("--min-quality", type=min_quality,
                 help="quality floor in the task's metric (e.g. 0.95) or relative to the dense model (-1%)"),
)
@task_options()
@options(
    click.option("--out", type=click.Path(path_type=Path), help="output folder (default: a new folder under "
                 "$EDGEPRUNE_RUNS, else runs/)"),
    click.option("--resume", type=click.Path(path_type=Path), metavar="DIR",
                 help="continue an interrupted fit into DIR"),
    click.option("--runtime", type=Parsed(runtime_list, "|".join(RUNTIMES.names()) + "[,...]"),
                 metavar="|".join(RUNTIMES.names()) + "[,...]",
                 help="the runtimes to search, comma-separated (e.g. executorch,litert: the search picks the runtime "
                 "too); default: the profile's runtime.runtimes, else its runtime"),
    click.option("--recipe", multiple=True, type=click.Choice(RECIPES.names()), help="quantization recipe to use "
                 "(repeat for a ladder; default: the runtime's ladder, highest fidelity first)"),
    click.option("--trim-vocab/--no-trim-vocab", default=None, help="always / never keep only the embedding rows "
                 "of tokens the task's data uses (ships vocabulary.json); default: the search tries both"),
    click.option("--ffn-fractions", type=number_list(float, "0,0.25,0.5"), default="0,0.25,0.5", show_default=True,
                 metavar="F,F", help="FFN neuron fractions the search may remove (0 turns it off)"),
    click.option("--ffn-allocation", type=click.Choice(FFN_ALLOCATIONS), default=DEFAULT_FFN_ALLOCATION,
                 show_default=True, help="how an FFN fraction is spread over the layers: the same fraction of each "
                 "(uniform), or groups of 32 neurons of least fluctuation first, whichever layer (scored)"),
    click.option("--layer-removals", type=number_list(int, "0,1,2"), default="0,1,2", show_default=True,
                 metavar="N,N", help="numbers of whole layers the search may remove (0 turns it off)"),
    click.option("--quality-tolerance", type=finite, metavar="Q",
                 help="validation qualities this close are a tie, won by the less compressed candidate "
                 "(default: one standard error of the dense model's validation accuracy; 0 for other metrics)"),
    click.option("--require-device", is_flag=True,
                 help="exit 5 when the device is unreachable instead of fitting on estimated figures"),
    click.option("--criterion", type=click.Choice(["auto", *CRITERIA.names()]), default="auto", show_default=True,
                 help="head importance criterion; auto compares fluctuation and Taylor on the model and keeps the "
                 "one whose pruned model measures better on the validation split (PyTorch)"),
    click.option("--normalize", type=click.Choice(["none", "l2", "zscore"]),
                 help="per-layer normalization of the scores (default: the chosen scoring's; none for a named "
                 "criterion)"),
    click.option("--no-compensation", is_flag=True,
                 help="remove heads outright instead of folding their mean outputs into the output bias"),
    click.option("--scoring-examples", type=int, default=256, show_default=True,
                 help="calibration examples for scoring"),
    click.option("--recover-steps", type=Parsed(recover_steps, "steps"), default=AUTO, show_default=True,
                 metavar="auto|N", help="distil pruned candidates from the dense teacher before they are quantized; "
                 f"auto: a built candidate whose PyTorch estimate falls short of the dense teacher's by more than "
                 f"--quality-tolerance, for {AUTO_RECOVER_STEPS} steps; N: every pruned candidate built, N steps; "
                 "0: off"),
    click.option("--recover-precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
                 help="the students' training arithmetic; auto: bfloat16 autocast (float32 weights) where the CPU "
                 "computes in bfloat16 natively, else float32"),
    click.option("--recover-quantization-aware", type=click.Choice((AUTO, "none", *GRID_RECIPES)), default=AUTO,
                 show_default=True, metavar="auto|none|RECIPE",
                 help="train the recovered students through this recipe's 4-bit grid and leave them on it, so that "
                 f"its artifact holds them exactly ({', '.join(GRID_RECIPES)}; an -all recipe's output layer too, "
                 "placed by GPTQ first); auto: on the grid of the ladder's such recipe with a 4-bit output layer, "
                 "else its first, when the teacher's weights already lie on it (a model from a Q4_1 GGUF), else in "
                 "float; none: in float"),
    click.option("--time-limit", type=minutes_or_none, default=DEFAULT_TIME_LIMIT_MINUTES, show_default=True,
                 metavar="MINUTES|none",
                 help="start no candidate after the fit has run this long, once one meets every budget: the best so "
                 "far ships and the report lists what could still have won (the candidate in progress and the "
                 "winner's test evaluation finish first); none: search to the end"),
    click.option("--json", is_flag=True, help="print result.json (a fleet: fleet.json) to stdout"),
    click.option("--boards", type=click.Path(path_type=Path), metavar="TOML", help="a lab on Ray (pip install "
                 "'edgeprune[cluster]'): the lab's boards ([[board]]: name, profile, connection, node_resource); a "
                 "device with boards here is benchmarked on them, one artifact at a time per board, another board of "
                 "its profile taking over from one that stops answering"),
    click.option("--ray", metavar="ADDRESS", help="run on this Ray cluster (its head's HOST:PORT, or auto to start "
                 "one on this machine; default with --boards: $RAY_ADDRESS): the boards' actors, and the builds of "
                 "the candidates ranked next (export, verify, evaluate), started on its workers while one is "
                 "measured"),
    click.option("--builds-ahead", type=int, metavar="N",
                 help="with --ray: how many candidate builds may run ahead on the cluster (0: none; default: 2 when "
                 "a node of the cluster is another machine, else none)"),
    click.option("--shared-folder", type=click.Path(path_type=Path), metavar="DIR",
                 help="with --ray: a folder every node mounts at this same path (e.g. NFS); builds ahead write their "
                 "artifacts there instead of sending them through Ray's object store"),
)
@output_options
@click.pass_context
def fit_command(ctx: click.Context, **values: object) -> int:
    """Prune, quantize, export and benchmark until the artifact meets every budget of the device."""
    args = as_args(values)
    args.device_budgets = ctx.lookup_default("device_budgets") or {}  # [fit.budgets.DEVICE] of edgeprune.toml
    args.latency_percentile = int(args.latency_percentile)
    return run_fit(args)


def run_fit(args: SimpleNamespace) -> int:
    from edgeprune.devices import load_profile
    from edgeprune.quantize import fit_ladder
    from edgeprune.search.fit import FitOptions, fit_task
    from edgeprune.serialization import to_jsonable

    devices = args.device or ["host"]
    profiles = [load_profile(device) for device in devices]  # validate cheap things before any heavy work
    names = [each.name for each in profiles]
    if len(set(names)) != len(names):
        raise UserInputError(f"a device appears twice in the fleet: {', '.join(names)}")
    given = given_connection_flags(vars(args))
    if len(profiles) > 1 and given:
        raise UserInputError(f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} one device's connection; "
                             "in a fleet each device's profile ([connection]) says how to reach it")
    profile = dataclasses.replace(profiles[0], endpoint=endpoint_from(profiles[0], args))
    for each in profiles:
        fit_ladder(args.runtime or each.searched_runtimes, args.recipe)  # a recipe of another runtime: one line
    # one device: its runtimes, named (as before fleets); a fleet: each device's own unless --runtime says
    runtime = args.runtime or (profile.searched_runtimes if len(profiles) == 1 else None)
    if args.scoring_examples < 1:
        raise UserInputError(f"--scoring-examples must be at least 1, got {args.scoring_examples}")
    if args.quality_tolerance is not None and not 0 <= args.quality_tolerance < math.inf:
        raise UserInputError(f"--quality-tolerance must be a finite number at least 0 (in the task metric's units: "
                             f"0.01 is a point of accuracy, 2 is 2 of perplexity), got {args.quality_tolerance}")
    if args.resume is not None and args.out is not None and args.resume != args.out:
        raise UserInputError("--resume DIR continues the fit that was writing to DIR; leave out --out")
    if args.resume is None and args.out is not None:
        check_output_folder(args.out)  # before the task is built: a bad --out costs nothing
    lab = lab_boards(args)  # the boards file is checked before any heavy work, like the profiles
    limits = dict(max_mb=args.max_mb, max_memory_mb=args.max_memory_mb, max_latency_ms=args.max_latency_ms,
                  max_energy_mj=args.max_energy_mj, min_decode_tps=args.min_decode_tps, max_ttft_ms=args.max_ttft_ms,
                  min_quality=args.min_quality,
                  latency_percentile=args.latency_percentile, memory_measure=args.memory_measure)
    budgets = fleet_budgets(profiles, limits, args.device_budgets)
    task = task_from(args)
    options = FitOptions(criterion=args.criterion, normalize=args.normalize, compensate=not args.no_compensation,
                         scoring_examples=args.scoring_examples, runtime=runtime,
                         recipes=tuple(args.recipe) if args.recipe else None, trim_vocabulary=args.trim_vocab,
                         recover_steps=args.recover_steps, recovery_precision=args.recover_precision,
                         recovery_quantization_aware=None if args.recover_quantization_aware == "none"
                         else args.recover_quantization_aware,
                         ffn_fractions=args.ffn_fractions, ffn_allocation=args.ffn_allocation,
                         layer_removals=args.layer_removals, require_device=args.require_device,
                         quality_tolerance=args.quality_tolerance, time_limit_minutes=args.time_limit)
    out = args.resume if args.resume is not None else args.out
    on_ray = args.ray is not None or args.boards is not None
    ahead = args.builds_ahead if on_ray else 0  # None on Ray: two when the cluster has other machines
    if on_ray and out is None:  # named here, so that a line about a lost cluster can say what to resume
        from edgeprune.search.fit import default_out_dir

        out = default_out_dir()
    with lab_pool(lab, args.ray, task.progress, out) as boards:
        if len(profiles) > 1:
            return run_fleet(task, profiles, budgets, out, options, args, boards, ahead)
        result = fit_task(task, profile, budgets[profile.name], out, options, task.progress,
                          resume=args.resume is not None, boards=boards, builds_ahead=ahead,
                          shared_folder=args.shared_folder)
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
              args: SimpleNamespace, boards, ahead: int | None) -> int:  # noqa: ANN001 - BoardPool or None
    from edgeprune.search.fleet import fit_fleet
    from edgeprune.serialization import to_jsonable

    result = fit_fleet(task, profiles, budgets, out, options, task.progress, resume=args.resume is not None,
                       boards=boards, builds_ahead=ahead, shared_folder=args.shared_folder)
    if args.json:
        print(json.dumps(to_jsonable(result), indent=2))
    else:
        for member in result.members:
            print(f"{member.device}: {member.status}: {member.message}")
        print(f"wrote {result.out_dir}/fleet.html, fleet.json and a folder per device")
    return EXIT_OK if result.fits else EXIT_BUDGET


def lab_boards(args: SimpleNamespace) -> list | None:
    """The boards of --boards, checked (None without --boards)."""
    if args.builds_ahead is not None and args.builds_ahead < 0:
        raise UserInputError(f"--builds-ahead must be 0 or more, got {args.builds_ahead}")
    for flag, value in (("--builds-ahead", args.builds_ahead), ("--shared-folder", args.shared_folder)):
        if value is not None and args.ray is None and args.boards is None:
            raise UserInputError(f"{flag} is for builds ahead on Ray; add --ray ADDRESS (or drop it)")
    if args.shared_folder is not None:
        if not args.shared_folder.is_dir():
            raise UserInputError(f"--shared-folder {args.shared_folder} is not a folder here; mount the shared "
                                 "folder at the same path on every node")
    if args.ray is None and args.boards is None:
        return None
    from edgeprune.extras import require_extra

    require_extra("cluster", "a lab on Ray (--ray, --boards)")
    if args.boards is None:
        return None
    from edgeprune.cluster.boards import load_boards

    return load_boards(args.boards)


@contextlib.contextmanager
def lab_pool(boards: list | None, address: str | None, progress, out: Path | None = None):  # noqa: ANN001, ANN201
    """Connected to the Ray cluster at `address` (with --ray or --boards), the pool of `boards` (None without),
    closed, and a Ray started here stopped, afterwards. A cluster whose head stops answering meanwhile ends the
    process (`stop_when_cluster_lost`)."""
    if boards is None and address is None:
        yield None
        return
    from edgeprune.cluster import BoardPool, ClusterWatch, connect_ray
    from edgeprune.cluster.connect import LOCAL

    address = address or os.environ.get("RAY_ADDRESS")
    started = connect_ray(address)
    watch = ClusterWatch(address, stop_when_cluster_lost(address, out)) if address and address != LOCAL else None
    try:
        with watch or contextlib.nullcontext():
            if boards is None:
                yield None
                return
            with BoardPool(boards, progress) as pool:
                yield pool
    finally:
        if started:
            import ray

            ray.shutdown()


def stop_when_cluster_lost(address: str, out: Path | None):  # noqa: ANN201 - a callback for ClusterWatch
    """What a fit on Ray does when the head stops answering: one line and exit 5 at once, its finished work kept
    (the journal is on disk record by record, every other file is written whole or not at all), instead of
    waiting on Ray, which would end the process itself a minute later in its own words."""

    # the terminal's stderr as it is now: while an exporter runs, its output (fd 2) goes to a hidden sink
    try:
        terminal: int | None = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # a stream without a file (a test's capture)
        terminal = None

    def stop(reason: str) -> None:
        resume = f"--resume {out}" if out is not None else "--resume OUT"
        line = (f"edgeprune: error: lost the Ray cluster at {address} mid-fit ({reason}); the finished work is kept: "
                f"continue with `edgeprune fit ... {resume}` without --ray, or once the cluster is back\n")
        if terminal is not None:
            os.write(terminal, line.encode())
        else:
            sys.stderr.write(line)
            sys.stderr.flush()
        os._exit(DeviceUnreachableError.exit_code)  # from the watching thread: the main one may be inside Ray

    return stop
