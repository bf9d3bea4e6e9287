"""`edgeprune distill`: recover a pruned model by distillation from the dense teacher of a bundled task,
optionally after removing its most redundant layers (angular distance) and a share of its FFN neurons."""

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace

import click

from edgeprune.cli.common import EXIT_OK, as_args, check_output_folder, epilog, finite, output_options, read_json
from edgeprune.errors import UserInputError

NEURON_CRITERIA = ("activation", "weight-norm")  # of edgeprune.pruning.ffn.NEURON_CRITERIA; parsing imports no torch
PRECISIONS = ("auto", "float32", "bfloat16")  # of edgeprune.recovery.precision.PRECISIONS, likewise
# the recipes whose linears lie on an asymmetric 4-bit grid (edgeprune.recovery.weight_grid.grid_of), likewise
GRID_RECIPES = ("litert-int4", "litert-int4-all", "int4-decoder", "int4-decoder-all")
# flags that override the config file, by DistillConfig field
OVERRIDES = {"max_steps": int, "max_seconds": float, "max_epochs": int, "learning_rate": float,
             "temperature": float, "task_weight": float, "kd_weight": float, "embedding_weight": float,
             "hidden_weight": float, "warmup_steps": int, "eval_every": int, "patience": int, "seed": int,
             "precision": PRECISIONS, "quantization_aware": GRID_RECIPES}
OVERRIDE_HELP = {"quantization_aware": "train the student through this recipe's 4-bit grid and leave it on it, so that "
                 "the recipe's artifact holds the recovered weights exactly; an -all recipe's output layer too, placed "
                 "by GPTQ first (default: float weights)"}


def _defaults():  # noqa: ANN202 - a DistillConfig
    from edgeprune.recovery.config import DistillConfig

    return DistillConfig()


def override_options(command: Callable) -> Callable:
    """One flag per DistillConfig field in OVERRIDES, default None: only a given flag overrides the config file."""
    for field, kind in reversed(OVERRIDES.items()):
        parse = click.Choice(kind) if isinstance(kind, tuple) else finite if kind is float else kind
        command = click.option(f"--{field.replace('_', '-')}", type=parse, default=None,
                               help=OVERRIDE_HELP.get(field, f"(default: {getattr(_defaults(), field)})"))(command)
    return command


@click.command("distill", epilog=epilog(["edgeprune distill --model pruned/ --max-steps 60 --out recovered/",
                                        "edgeprune distill --model pruned/ --remove-layers 1 --ffn-ratio 0.25 "
                                        "--max-seconds 300 --out recovered/",
                                        "edgeprune distill --task smollm2-bbc --model pruned-smollm2/ --max-steps 150 "
                                        "--out recovered-smollm2/"],
                                        "0 written; 2 bad input; 130 Ctrl-C"))
@click.option("--model", type=click.Path(path_type=Path), required=True,
              help="the pruned model folder (from `edgeprune prune`)")
@click.option("--task", default="minilm-bbc", show_default=True, help="bundled task whose dense model teaches "
              "(minilm-bbc, smollm2-bbc)")
@click.option("--teacher-model", type=click.Path(path_type=Path), help="dense teacher folder instead of the bundled "
              "task's model")
@click.option("--max-length", type=int, default=128, show_default=True, help="tokens per input")
# not --config: that flag names the edgeprune.toml project file of every verb
@click.option("--distill-config", type=click.Path(path_type=Path), help="a DistillConfig JSON; the flags below "
              "override it")
@override_options
@click.option("--batch-size", type=int, help="training and validation batch (default: the task's: 16, a decoder's 2)")
@click.option("--train-limit", type=int, help="use only the first N calibration documents")
@click.option("--validation-limit", type=int, help="use only the first N validation documents (default: all; a "
              "decoder task's 16)")
@click.option("--remove-layers", type=int, default=0, show_default=True, metavar="N",
              help="first remove the N consecutive layers that change the hidden states least (angular distance on "
              "calibration documents)")
@click.option("--ffn-ratio", type=finite, default=0.0, show_default=True, metavar="R",
              help="then remove this share (0 <= R < 1) of every layer's FFN neurons")
@click.option("--ffn-criterion", type=click.Choice(NEURON_CRITERIA), default="activation", show_default=True,
              help="how FFN neurons are scored")
@click.option("--scoring-batches", type=int, default=8, show_default=True, metavar="N",
              help="calibration batches that score layers and FFN neurons")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="folder for the recovered model and "
              "distill.json")
@click.option("--json", is_flag=True, help="print distill.json's summary as JSON")
@output_options
def distill_command(**values: object) -> int:
    """Recover a pruned model by distillation from the dense teacher.

    A decoder task (smollm2-bbc) distils with its own recovery settings in place of the defaults shown: learning
    rate 3e-4, temperature 1, no next-token loss, batches of 2 blocks, 16 validation blocks, as fit does."""
    return run_distill(as_args(values))


def config_from(args: SimpleNamespace, task_settings: Mapping[str, object]):  # noqa: ANN201 - a DistillConfig
    """DistillConfig's defaults, replaced by the task's own recovery settings (a decoder's learning rate, temperature,
    loss weights), then by --distill-config's file, then by each flag given."""
    from edgeprune.recovery.config import DistillConfig

    config = DistillConfig.from_dict(read_json(args.distill_config, "distill config")) if args.distill_config else (
        DistillConfig(**task_settings))
    changes = {field: getattr(args, field) for field in OVERRIDES if getattr(args, field) is not None}
    return dataclasses.replace(config, **changes)  # validated again by __post_init__


def run_distill(args: SimpleNamespace) -> int:
    from edgeprune.models.io import load
    from edgeprune.progress import Progress
    from edgeprune.recovery import distill_pruned, save_distilled
    from edgeprune.tasks import bundled_task
    from edgeprune.tasks.compatibility import check_model_folder

    if not (args.model / "config.json").is_file():
        raise UserInputError(f"model folder {args.model} does not exist or has no config.json; "
                             "pass a folder written by `edgeprune prune`")
    check_model_folder(args.model)
    check_output_folder(args.out)
    if args.batch_size is not None and args.batch_size < 1:
        raise UserInputError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.teacher_model is not None and not args.teacher_model.exists():
        raise UserInputError(f"teacher model path {args.teacher_model} does not exist")
    if args.remove_layers < 0:
        raise UserInputError(f"--remove-layers must be >= 0, got {args.remove_layers}")
    if not 0 <= args.ffn_ratio < 1:
        raise UserInputError(f"--ffn-ratio must be a share of neurons in [0, 1), got {args.ffn_ratio}")
    if args.scoring_batches < 1:
        raise UserInputError(f"--scoring-batches must be at least 1, got {args.scoring_batches}")
    for flag, value in (("--train-limit", args.train_limit), ("--validation-limit", args.validation_limit)):
        if value is not None and value < 1:
            raise UserInputError(f"{flag} must be at least 1, got {value}")
    task = bundled_task(args.task, model_path=args.teacher_model, max_length=args.max_length,
                        progress=Progress(enabled=not args.quiet))
    config = config_from(args, task.recovery_settings)
    distilled = distill_pruned(load(args.model), task, config, remove_layers=args.remove_layers,
                               ffn_ratio=args.ffn_ratio, ffn_criterion=args.ffn_criterion,
                               scoring_batches=args.scoring_batches, batch_size=args.batch_size,
                               train_limit=args.train_limit, validation_limit=args.validation_limit, source=args.model)
    save_distilled(distilled, args.out)
    result = distilled.result
    if args.json:
        print(json.dumps({"model": str(args.out), "steps": result.steps, "stopped": result.stopped,
                          "metric": result.metric, "initial": result.initial_metric, "best": result.best_metric,
                          "best_step": result.best_step, "removed_layers": distilled.removed_layers,
                          "intermediate_sizes": distilled.intermediate_sizes}, indent=2))
        return EXIT_OK
    removed = f"removed layers {distilled.removed_layers}; " if distilled.removed_layers is not None else ""
    if distilled.ffn_ratio is not None:
        removed += f"FFN widths {distilled.intermediate_sizes}; "
    print(f"{removed}distilled {result.steps} steps ({result.stopped}); validation {result.metric} "
          f"{result.initial_metric:.4f} -> {result.best_metric:.4f} (best at step {result.best_step}); "
          f"wrote {args.out}")
    return EXIT_OK
