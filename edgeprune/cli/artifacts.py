"""`edgeprune quantize`, `export` and `bench`: recipes, runtime artifacts, and timing them where they run."""

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from edgeprune.cli.common import (
    EXIT_OK,
    as_args,
    check_output_file,
    check_output_folder,
    epilog,
    finite,
    output_options,
    task_from,
    task_options,
)
from edgeprune.cli.devices import connection_options, endpoint_from
from edgeprune.errors import UserInputError
from edgeprune.quantize import RECIPES
from edgeprune.runtimes import RUNTIMES, runtime_for_suffix

if TYPE_CHECKING:
    from edgeprune.quantize import Recipe
    from edgeprune.tasks import Task


@click.command("quantize", epilog=epilog(["edgeprune quantize --recipe int8-emb4 --out minilm-int8.pt2"],
                                         "0 written; 2 bad input"))
@task_options()
@click.option("--recipe", default="int8", show_default=True,
              type=click.Choice(RECIPES.names()),
              help="an ExecuTorch recipe (LiteRT quantizes on export: `edgeprune export --runtime litert`)")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="a .pt2 file: the quantized module as a torch.export program")
@click.option("--json", is_flag=True, help="print what was written as JSON")
@output_options
def quantize_command(**values: object) -> int:
    """Quantize the task's model with a recipe; save it for PyTorch."""
    return run_quantize(as_args(values))


@click.command("export", epilog=epilog(["edgeprune export --runtime litert --recipe litert-int8 --out minilm.tflite",
                                       "edgeprune export --recipe int8 --out minilm.pte"],
                                      "0 written and verified; 2 bad input; 4 the artifact disagrees with PyTorch"))
@task_options()
@click.option("--runtime", type=click.Choice(RUNTIMES.names()),
              help="default: the recipe's runtime, else the one --out's suffix names, else executorch")
@click.option("--recipe", type=click.Choice(RECIPES.names()), help="quantization recipe (default: the runtime's fp32)")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="artifact file (.pte or .tflite)")
@click.option("--json", is_flag=True, help="the same JSON (the summary is always printed as JSON)")
@output_options
def export_command(**values: object) -> int:
    """Export the task's model for a runtime, verified against PyTorch (summary beside it: OUT.json)."""
    return run_export(as_args(values))


@click.command("bench", epilog=epilog([
    "edgeprune bench minilm.tflite --threads 2 --runs 40",
    "edgeprune bench model.pte --device pi5 --ssh pi@raspberrypi.local --identity ~/.ssh/id_ed25519",
    "edgeprune bench model.tflite --device android-arm64 --adb R58M12345 --binary /data/local/tmp/benchmark_model"],
    "0 done; 2 bad input; 4 the artifact is empty, cut off or not of its runtime; 5 device unreachable; "
    "6 a device command timed out"))
@task_options()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--device", default="host", show_default=True, envvar="EDGEPRUNE_DEVICE",
              help="a device profile: its runtime, threads and connection (env EDGEPRUNE_DEVICE)")
@click.option("--runtime", type=click.Choice(RUNTIMES.names()), help="default: from the file type")
@click.option("--threads", type=int, help="default: the device profile's")
@click.option("--runs", type=int, default=30, show_default=True)
@click.option("--warmup", type=int, default=5, show_default=True)
@click.option("--min-seconds", type=finite, default=0.0, show_default=True,
              help="keep timing beyond --runs until the runs add up to this long (fit times at least 1 s); the "
              "Python runner only")
@click.option("--binary", metavar="PATH", help="time with this native benchmark tool (benchmark_model for .tflite, "
              "executor_runner for .pte): a path on the device, or a local file to push")
@click.option("--timeout-s", type=finite, default=600.0, show_default=True, help="limit for the benchmark command")
@click.option("--out", type=click.Path(path_type=Path), help="folder for the JSON and Markdown results (default: the "
              "artifact's)")
@click.option("--json", is_flag=True, help="print the result as JSON (default: the Markdown report)")
@connection_options
@output_options
def bench_command(**values: object) -> int:
    """Benchmark an artifact in a separate process on a device; save JSON and Markdown.

    Inputs: shapes, dtypes and value ranges from the model.json beside the artifact (what fit ships), else from
    the program's own input metadata; --task/--model/--data time it on the task's first validation example
    instead."""
    return run_bench(as_args(values))


def run_quantize(args: SimpleNamespace) -> int:
    import torch

    from edgeprune.serialization import write_json_atomic

    recipe = RECIPES.get(args.recipe)
    if not RUNTIMES.get(recipe.runtime).quantizes_in_pytorch:
        raise UserInputError(f"{recipe.name} quantizes the converted LiteRT flatbuffer; use "
                             f"`edgeprune export --runtime litert --recipe {recipe.name}`")
    if args.out.suffix != ".pt2":
        raise UserInputError(f"the quantized program is saved as a .pt2 file; got --out {args.out}")
    check_output_file(args.out)
    check_output_file(args.out.with_suffix(".json"), "--out (its .json summary)")
    task = task_from(args)
    quantized = recipe.apply(task.dense_model(), _calibration(task, recipe))
    program = torch.export.export(quantized, task.example_inputs("validation", 1)[0], strict=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(f".{args.out.name}.partial")
    torch.export.save(program, partial)
    partial.replace(args.out)
    summary = {"program": str(args.out), "recipe": recipe.name, "task": task.describe()}
    write_json_atomic(args.out.with_suffix(".json"), summary)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"wrote {args.out} ({recipe.description}); run it with torch.export.load(path).module()")
    return EXIT_OK


def _calibration(task: "Task", recipe: "Recipe") -> list | None:
    """Real inputs of the calibration split for recipes that calibrate (activation ranges, an output layer)."""
    from edgeprune.quantize import CALIBRATION_EXAMPLES

    return task.example_inputs("calibration", CALIBRATION_EXAMPLES) if recipe.needs_calibration else None


def run_export(args: SimpleNamespace) -> int:
    from edgeprune.export import export, load_artifact
    from edgeprune.quantize import FP32_RECIPE, recipe_for_runtime
    from edgeprune.serialization import write_json_atomic

    # a recipe belongs to one runtime and a suffix names one: either says what --runtime would
    args.runtime = (args.runtime or (RECIPES.get(args.recipe).runtime if args.recipe else None)
                    or runtime_for_suffix(args.out.suffix) or "executorch")
    recipe = recipe_for_runtime(args.recipe or FP32_RECIPE[args.runtime], args.runtime)
    suffix = RUNTIMES.get(args.runtime).suffix
    if args.out.suffix != suffix:
        raise UserInputError(f"{args.runtime} artifacts end in {suffix}; got --out {args.out}")
    check_output_file(args.out)
    check_output_file(args.out.with_suffix(args.out.suffix + ".json"), "--out (its .json summary)")
    task = task_from(args)
    model = task.dense_model()
    task.progress.note(f"exporting with {recipe.name} ({recipe.description})")
    # the export cache fit uses (keyed by the weights, the recipe and the input signature): an export repeated, or
    # the dense baseline of a fit that follows, is not lowered again; the artifact is verified either way
    artifact = export(model, task.example_inputs("validation", 1)[0], args.out, recipe, task.cache_dir / "exports",
                      calibration=_calibration(task, recipe), verify_on=task.example_inputs("validation", 8))
    check = artifact.verification
    from edgeprune.serialization import to_jsonable
    from edgeprune.tasks.base import input_signature

    quality = task.runtime_quality(load_artifact(args.out), "validation")
    summary = {"artifact": str(args.out), "runtime": args.runtime, "recipe": recipe.name,
               "file_bytes": artifact.size_bytes, "export_seconds": round(artifact.export_seconds, 1),
               "from_export_cache": artifact.cached,
               "min_cosine_to_pytorch": check.min_cosine, "max_abs_error": check.max_abs_error,
               f"validation_{quality.metric}": quality.value, "task": task.kind,
               "inputs": to_jsonable(input_signature(task))}
    write_json_atomic(args.out.with_suffix(args.out.suffix + ".json"), summary)
    print(json.dumps(summary, indent=2))
    return EXIT_OK


def run_bench(args: SimpleNamespace) -> int:
    from edgeprune.bench import benchmark_on
    from edgeprune.bench.report import render_bench_markdown
    from edgeprune.devices import load_profile
    from edgeprune.devices.transports import open_transport
    from edgeprune.export import check_artifact
    from edgeprune.serialization import to_jsonable, write_json_atomic, write_text_atomic

    profile = load_profile(args.device)
    if not args.artifact.exists():
        raise UserInputError(f"artifact {args.artifact} does not exist")
    if args.artifact.is_dir():
        suffixes = " or ".join(RUNTIMES.get(name).suffix for name in RUNTIMES)
        raise UserInputError(f"artifact {args.artifact} is a folder; name the {suffixes} file")
    if runtime_for_suffix(args.artifact.suffix) is None and args.runtime is None:
        raise UserInputError(f"cannot tell the runtime of {args.artifact}; pass --runtime {'|'.join(RUNTIMES.names())}")
    if args.runs < 1 or args.warmup < 0 or not 0 <= args.min_seconds < math.inf:
        raise UserInputError("--runs must be at least 1, --warmup and --min-seconds at least 0")
    if args.threads is not None and args.threads < 1:
        raise UserInputError("--threads must be at least 1")
    if not 0 < args.timeout_s < math.inf:
        raise UserInputError(f"--timeout-s must be a positive number of seconds, got {args.timeout_s:g}")
    if args.binary is not None and (not args.binary.strip() or any(c in args.binary for c in "\n\r\0")):
        raise UserInputError(f"--binary {args.binary!r} is not a path")
    endpoint = endpoint_from(profile, args)
    check_output_folder(args.out or args.artifact.parent, "--out" if args.out else "the artifact's folder (--out)",
                        empty=False)
    from edgeprune.devices.setup import device_python

    with open_transport(endpoint, device_python(profile, endpoint)) as transport:
        transport.workdir  # noqa: B018 - connect now: an unreachable device fails before the model loads
        check_artifact(args.artifact, args.runtime)  # empty, cut off or of another format: exit 4, nothing run
        inputs, inputs_source = _bench_inputs(args)
        result = benchmark_on(transport, args.artifact, inputs, args.runtime,
                              args.threads or profile.threads, args.warmup, args.runs, device=profile.name,
                              timeout_s=args.timeout_s, profile=profile, native_binary=args.binary,
                              min_seconds=args.min_seconds)
        result.notes.append(inputs_source)
        connection = transport.label
    folder = args.out or args.artifact.parent
    stem = f"{args.artifact.name}.{profile.name}.bench"
    write_json_atomic(folder / f"{stem}.json", to_jsonable(result))
    markdown = render_bench_markdown(result, args.artifact, connection)
    write_text_atomic(folder / f"{stem}.md", markdown)
    print(json.dumps(to_jsonable(result), indent=2) if args.json else markdown, end="\n" if args.json else "")
    if not args.quiet:
        sys.stderr.write(f"edgeprune: wrote {folder / stem}.json and .md\n")
    return EXIT_OK


def _bench_inputs(args: SimpleNamespace) -> "tuple[tuple, str]":
    """The task's first validation example when --task, --model or --data name one (checked against what the
    program takes), else inputs built from the artifact's model.json or its own metadata: no task loads."""
    from edgeprune.bench.inputs import artifact_inputs, check_inputs_fit

    if any(getattr(args, name, None) is not None for name in ("task", "model", "data")):
        task = task_from(args)
        inputs = task.example_inputs("validation", 1)[0]
        check_inputs_fit(inputs, args.artifact, args.runtime)
        return inputs, f"inputs: the first validation example of task {task.name}"
    return artifact_inputs(args.artifact, args.runtime)
