"""`edgeprune distill`: recover a pruned model by distillation from the dense teacher of a bundled task,
optionally after removing its most redundant layers (angular distance) and a share of its FFN neurons."""

import argparse
import dataclasses
from pathlib import Path

from edgeprune.cli.common import EXIT_OK, check_output_folder, read_json
from edgeprune.errors import UserInputError

NEURON_CRITERIA = ("activation", "weight-norm")  # of edgeprune.pruning.ffn.NEURON_CRITERIA; parsing imports no torch
# flags that override the config file, by DistillConfig field
OVERRIDES = {"max_steps": int, "max_seconds": float, "max_epochs": int, "learning_rate": float,
             "temperature": float, "task_weight": float, "kd_weight": float, "embedding_weight": float,
             "hidden_weight": float, "warmup_steps": int, "eval_every": int, "patience": int, "seed": int}


def add_parsers(verbs: argparse._SubParsersAction) -> None:
    distill = verbs.add_parser("distill", help="recover a pruned model by distillation from the dense teacher")
    distill.add_argument("--model", type=Path, required=True, help="the pruned model folder (from `edgeprune prune`)")
    distill.add_argument("--task", default="minilm-bbc", help="bundled task whose dense model teaches (default: "
                         "minilm-bbc)")
    distill.add_argument("--teacher-model", type=Path, help="dense teacher folder instead of the bundled MiniLM")
    distill.add_argument("--max-length", type=int, default=128, help="tokens per input (default: 128)")
    # not --config: that flag names the edgeprune.toml project file of every verb
    distill.add_argument("--distill-config", type=Path, help="a DistillConfig JSON; the flags below override it")
    for field, kind in OVERRIDES.items():
        distill.add_argument(f"--{field.replace('_', '-')}", type=kind, default=None,
                             help=f"(default: {getattr(_defaults(), field)})")
    distill.add_argument("--batch-size", type=int, default=16, help="training and validation batch (default: 16)")
    distill.add_argument("--train-limit", type=int, help="use only the first N calibration documents")
    distill.add_argument("--validation-limit", type=int, help="use only the first N validation documents")
    distill.add_argument("--remove-layers", type=int, default=0, metavar="N",
                         help="first remove the N consecutive layers that change the hidden states least (angular "
                              "distance on calibration documents); default: 0")
    distill.add_argument("--ffn-ratio", type=float, default=0.0, metavar="R",
                         help="then remove this share (0 <= R < 1) of every layer's FFN neurons; default: 0")
    distill.add_argument("--ffn-criterion", choices=NEURON_CRITERIA, default="activation",
                         help="how FFN neurons are scored (default: activation)")
    distill.add_argument("--scoring-batches", type=int, default=8, metavar="N",
                         help="calibration batches that score layers and FFN neurons (default: 8)")
    distill.add_argument("--quiet", action="store_true", help="no progress on stderr")
    distill.add_argument("--out", type=Path, required=True, help="folder for the recovered model and distill.json")
    distill.set_defaults(run=run_distill)


def _defaults():  # noqa: ANN202 - a DistillConfig
    from edgeprune.recovery.config import DistillConfig

    return DistillConfig()


def config_from(args: argparse.Namespace):  # noqa: ANN201 - a DistillConfig
    from edgeprune.recovery.config import DistillConfig

    config = DistillConfig.from_dict(read_json(args.distill_config, "distill config")) if args.distill_config else (
        DistillConfig())
    changes = {field: getattr(args, field) for field in OVERRIDES if getattr(args, field) is not None}
    return dataclasses.replace(config, **changes)  # validated again by __post_init__


def run_distill(args: argparse.Namespace) -> int:
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
    if args.batch_size < 1:
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
    config = config_from(args)
    encoder = load(args.model)
    task = bundled_task(args.task, model_path=args.teacher_model, max_length=args.max_length,
                        progress=Progress(enabled=not args.quiet))
    distilled = distill_pruned(encoder, task, config, remove_layers=args.remove_layers, ffn_ratio=args.ffn_ratio,
                               ffn_criterion=args.ffn_criterion, scoring_batches=args.scoring_batches,
                               batch_size=args.batch_size, train_limit=args.train_limit,
                               validation_limit=args.validation_limit, source=args.model)
    save_distilled(distilled, args.out)
    result = distilled.result
    removed = f"removed layers {distilled.removed_layers}; " if distilled.removed_layers is not None else ""
    if distilled.ffn_ratio is not None:
        removed += f"FFN widths {distilled.intermediate_sizes}; "
    print(f"{removed}distilled {result.steps} steps ({result.stopped}); validation {result.metric} "
          f"{result.initial_metric:.4f} -> {result.best_metric:.4f} (best at step {result.best_step}); "
          f"wrote {args.out}")
    return EXIT_OK
