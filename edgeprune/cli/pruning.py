"""`edgeprune score` and `edgeprune prune`: head scores and pruning plans as JSON files."""

import argparse
from pathlib import Path

from edgeprune.cli.common import (
    EXIT_OK,
    add_task_arguments,
    check_output_file,
    check_output_folder,
    finite,
    parse_json,
    read_json,
    task_from,
)
from edgeprune.errors import UserInputError
from edgeprune.importance import CRITERIA, default_scoring
from edgeprune.importance.base import NORMALIZATIONS
from edgeprune.pruning import STRATEGIES

CALIBRATION_BATCH_SIZE = 16  # what fit scores and measures mean outputs with (FitOptions.scoring_batch_size)


def add_parsers(verbs: argparse._SubParsersAction) -> None:
    score = verbs.add_parser("score", help="score every attention head on the task's calibration data")
    add_task_arguments(score)
    score.add_argument("--criterion", help=f"head importance criterion, one of {', '.join(CRITERIA.names())} "
                       f"(default: the one fit uses for the model, {default_scoring().criterion})")
    score.add_argument("--examples", type=int, default=256, help="calibration documents to score on")
    score.add_argument("--out", type=Path, required=True, help="where to write the scores as JSON")

    prune = verbs.add_parser("prune", help="remove heads for real and save the smaller model")
    add_task_arguments(prune, model_help="the model folder to prune (default: the bundled MiniLM); with "
                       "compensation, the task's calibration data (as for `score`) measures the mean outputs")
    source = prune.add_mutually_exclusive_group(required=True)
    source.add_argument("--scores", type=Path, help="scores JSON written by `edgeprune score`")
    source.add_argument("--plan", type=Path, help="a plan JSON to apply as it is")
    prune.add_argument("--strategy", default="global-topk", choices=STRATEGIES.names(),
                       help="how scores become a plan (default: global-topk)")
    prune.add_argument("--remove", type=int, help="global-topk: heads to remove in all")
    prune.add_argument("--remove-per-layer", type=int, help="per-layer: heads to remove from each layer")
    prune.add_argument("--threshold", type=finite, help="threshold: remove heads scoring below this")
    prune.add_argument("--quantile", type=finite, help="threshold: remove heads below this quantile (0..1)")
    prune.add_argument("--min-heads-per-layer", type=int, default=1)
    prune.add_argument("--heads-multiple", type=int, default=1, help="round kept heads per layer up to a multiple")
    prune.add_argument("--normalize", choices=NORMALIZATIONS, help="per-layer normalization of the scores before "
                       f"selection (default: fit's for the model, {default_scoring().normalize})")
    prune.add_argument("--no-normalize", dest="normalize", action="store_const", const="none",
                       help=argparse.SUPPRESS)  # before --normalize existed; the same as --normalize none
    prune.add_argument("--compensate", action=argparse.BooleanOptionalAction,
                       help="fold each removed head's mean output on the calibration data into the output-projection "
                       "bias, as fit does (default: fit's choice for the model, "
                       f"{'compensate' if default_scoring().compensate else 'no-compensate'}); --no-compensate "
                       "removes heads outright and needs no data")
    prune.add_argument("--examples", type=int, default=256,
                       help="calibration documents the mean outputs are measured on (default: 256)")
    prune.add_argument("--plan-out", type=Path, help="where to write the plan JSON (default: OUT/plan.json)")
    prune.add_argument("--out", type=Path, required=True, help="folder for the pruned model")

    score.set_defaults(run=run_score)
    prune.set_defaults(run=run_prune)


def run_score(args: argparse.Namespace) -> int:
    from edgeprune.importance import score_heads
    from edgeprune.serialization import write_json_atomic

    if args.criterion is not None:
        CRITERIA.get(args.criterion)
    if args.examples < 1:
        raise UserInputError(f"--examples must be at least 1, got {args.examples}")
    check_output_file(args.out)
    task = task_from(args)
    teacher = task.teacher()
    criterion = args.criterion or default_scoring(teacher.model).criterion
    with task.progress.task(f"scoring heads ({criterion})", args.examples) as bar:
        scores = score_heads(teacher.model, bar.track(task.batches("calibration", CALIBRATION_BATCH_SIZE,
                                                                   limit=args.examples)),
                             criterion, loss_fn=task.loss)
    write_json_atomic(args.out, scores.to_dict())
    print(f"wrote {args.out}: {scores.scores.shape[0]} layers x {scores.scores.shape[1]} heads, "
          f"criterion {scores.criterion}, {scores.num_examples} examples")
    return EXIT_OK


def run_prune(args: argparse.Namespace) -> int:
    from edgeprune.importance import HeadScores
    from edgeprune.models.hub import model_folder
    from edgeprune.models.io import load, save
    from edgeprune.pruning import Constraints, PruningPlan, SelectionAmount, plan_heads, prune
    from edgeprune.serialization import write_json_atomic
    from edgeprune.tasks import minilm_model_path
    from edgeprune.tasks.compatibility import check_model_folder

    model_path = minilm_model_path() if args.model is None else model_folder(args.model)  # or a cached HF id
    check_model_folder(model_path)
    check_output_folder(args.out)
    if args.plan_out is not None:
        check_output_file(args.plan_out, "--plan-out")
    for flag, value, least in (("--remove", args.remove, 0), ("--remove-per-layer", args.remove_per_layer, 0),
                               ("--min-heads-per-layer", args.min_heads_per_layer, 1),
                               ("--heads-multiple", args.heads_multiple, 1), ("--examples", args.examples, 1)):
        if value is not None and value < least:
            raise UserInputError(f"{flag} must be at least {least}, got {value}")
    if args.plan is not None:
        plan = parse_json(PruningPlan.from_dict, read_json(args.plan, "plan"), args.plan)
    else:
        scores = parse_json(HeadScores.from_dict, read_json(args.scores, "scores"), args.scores)
        amount = SelectionAmount(args.remove, args.remove_per_layer, args.threshold, args.quantile)
        constraints = Constraints(args.min_heads_per_layer, args.heads_multiple)
        STRATEGIES.get(args.strategy).plan(scores, amount, constraints)  # a missing amount fails before any loading
    model = load(model_path)
    choice = default_scoring(model)
    if args.plan is None:
        plan = plan_heads(args.strategy, scores.normalize_per_layer(args.normalize or choice.normalize), amount,
                          constraints)
    compensate = choice.compensate if args.compensate is None else args.compensate
    batches = calibration_inputs(args) if compensate else None
    model = prune(model, plan, batches, compensate=compensate)
    write_json_atomic(args.plan_out or args.out / "plan.json", plan.to_dict())
    save(model, args.out)
    how = "their mean outputs folded into the output bias" if compensate else "removed outright"
    print(f"removed {plan.heads_removed} of {sum(plan.num_heads)} heads ({how}); wrote {args.out}")
    return EXIT_OK


def calibration_inputs(args: argparse.Namespace) -> list[dict]:
    """The model inputs of the task's first `--examples` calibration documents, batched as fit batches them."""
    try:
        task = task_from(args)
        return [{name: batch[name] for name in task.input_names}
                for batch in task.batches("calibration", CALIBRATION_BATCH_SIZE, limit=args.examples)]
    except UserInputError as error:
        raise UserInputError(f"{error} (prune measures the removed heads' mean outputs on the task's calibration "
                             "data, as fit does; --no-compensate removes them outright and needs no data)") from None
