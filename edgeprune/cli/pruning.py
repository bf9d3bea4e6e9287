"""`edgeprune score` and `edgeprune prune`: head scores and pruning plans as JSON files."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import click

from edgeprune.cli.common import (
    EXIT_OK,
    as_args,
    check_output_file,
    check_output_folder,
    epilog,
    finite,
    output_options,
    parse_json,
    quiet_libraries,
    read_json,
    task_from,
    task_options,
)
from edgeprune.errors import UserInputError
from edgeprune.importance import CRITERIA, default_scoring
from edgeprune.importance.base import NORMALIZATIONS
from edgeprune.pruning import STRATEGIES

CALIBRATION_BATCH_SIZE = 16  # what fit scores and measures mean outputs with (FitOptions.scoring_batch_size)


@click.command("score", epilog=epilog(["edgeprune score --examples 256 --out scores.json",
                                      "edgeprune score --criterion taylor --model my-bert/ --data reviews.csv "
                                      "--out scores.json"], "0 written; 2 bad input"))
@task_options()
@click.option("--criterion", type=click.Choice(["auto", *CRITERIA.names()]), default="auto", show_default=True,
              help="head importance criterion; auto chooses as fit does: fluctuation and Taylor compared by the "
              "validation quality of the model each ranking prunes to half its heads (PyTorch)")
@click.option("--examples", type=int, default=256, show_default=True, help="calibration documents to score on")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="where to write the scores as JSON")
@click.option("--json", is_flag=True, help="print a summary of what was written as JSON")
@output_options
def score_command(**values: object) -> int:
    """Score every attention head on the task's calibration data."""
    return run_score(as_args(values))


@click.command("prune", epilog=epilog(["edgeprune prune --scores scores.json --remove 24 --out pruned/",
                                      "edgeprune prune --plan pruned/plan.json --model other-copy/ "
                                      "--out pruned-again/"],
                                      "0 written; 2 bad input (both or neither of --scores and --plan, ...)"))
@task_options(model_help="the model folder to prune (default: the bundled MiniLM); with compensation, the task's "
              "calibration data (as for `score`) measures the mean outputs")
@click.option("--scores", type=click.Path(path_type=Path), help="scores JSON written by `edgeprune score` (or --plan)")
@click.option("--plan", type=click.Path(path_type=Path), help="a plan JSON to apply as it is (or --scores)")
@click.option("--strategy", default="global-topk", show_default=True, type=click.Choice(STRATEGIES.names()),
              help="how scores become a plan")
@click.option("--params", "joint_parameters", type=int, metavar="N",
              help="remove at least N parameters in heads and FFN neurons together, every layer its own widths "
              "(one ranking by fluctuation per parameter, both compensated; measured on the calibration data, so "
              "no --scores); the plan.json written is a structure plan")
@click.option("--ratio", "joint_ratio", type=finite, metavar="R",
              help="as --params, with N the fraction R (0 < R < 1) of the parameters heads and FFN neurons own")
@click.option("--ffn-multiple", type=int, default=32, show_default=True,
              help="with --params or --ratio: FFN widths stay multiples of this (a 4-bit recipe's group)")
@click.option("--remove", type=int, help="global-topk: heads to remove in all")
@click.option("--remove-per-layer", type=int, help="per-layer: heads to remove from each layer")
@click.option("--threshold", type=finite, help="threshold: remove heads scoring below this")
@click.option("--quantile", type=finite, help="threshold: remove heads below this quantile (0..1)")
@click.option("--min-heads-per-layer", type=int, default=1, show_default=True)
@click.option("--heads-multiple", type=int, default=1, show_default=True,
              help="round kept heads per layer up to a multiple")
@click.option("--normalize", type=click.Choice(NORMALIZATIONS), help="per-layer normalization of the scores before "
              f"selection (default: fit's for the model, {default_scoring().normalize} for encoders)")
@click.option("--no-normalize", is_flag=True, hidden=True)  # before --normalize existed: --normalize none
@click.option("--compensate/--no-compensate", default=None,
              help="fold each removed head's mean output on the calibration data into the output-projection bias, "
              "as fit does (default: fit's choice for the model); --no-compensate removes heads outright and needs "
              "no data")
@click.option("--examples", type=int, default=256, show_default=True,
              help="calibration documents the mean outputs are measured on")
@click.option("--plan-out", type=click.Path(path_type=Path), help="where to write the plan JSON (default: "
              "OUT/plan.json)")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="folder for the pruned model")
@click.option("--json", is_flag=True, help="print what was removed and written as JSON")
@output_options
def prune_command(no_normalize: bool, **values: object) -> int:
    """Remove heads for real and save the smaller model."""
    args = as_args(values)
    if no_normalize:
        args.normalize = "none"
    return run_prune(args)


def run_score(args: SimpleNamespace) -> int:
    from edgeprune.importance import score_heads
    from edgeprune.search.scoring import SCORING_KEY, measured_head_scores, scoring_decision
    from edgeprune.serialization import write_json_atomic

    if args.examples < 1:
        raise UserInputError(f"--examples must be at least 1, got {args.examples}")
    check_output_file(args.out)
    task = task_from(args)
    if args.criterion in (None, "auto"):
        teacher = task.teacher()  # the choice compares each ranking's pruned model with the dense one
        scores = measured_head_scores(task, teacher.model, teacher.validation, args.examples, CALIBRATION_BATCH_SIZE)
    else:
        with task.progress.task(f"scoring heads ({args.criterion})", args.examples) as bar:
            scores = score_heads(task.dense_model(), bar.track(task.batches("calibration", CALIBRATION_BATCH_SIZE,
                                                                       limit=args.examples)),
                                 args.criterion, loss_fn=task.loss)
    write_json_atomic(args.out, scores.to_dict())
    decision = scoring_decision(scores)
    if args.json:
        print(json.dumps({"scores": str(args.out), "criterion": scores.criterion, "layers": scores.scores.shape[0],
                          "heads_per_layer": scores.scores.shape[1], "examples": scores.num_examples,
                          "normalize": decision.choice.normalize if decision else None,
                          "scoring_decision": scores.extra.get(SCORING_KEY)}, indent=2))
        return EXIT_OK
    print(f"wrote {args.out}: {scores.scores.shape[0]} layers x {scores.scores.shape[1]} heads, "
          f"criterion {scores.criterion}, {scores.num_examples} examples")
    if decision is not None:
        print(decision.describe())
    return EXIT_OK


def run_prune(args: SimpleNamespace) -> int:
    from edgeprune.importance import HeadScores
    from edgeprune.models.hub import model_folder
    from edgeprune.models.io import load, save
    from edgeprune.pruning import Constraints, PruningPlan, SelectionAmount, plan_heads, prune
    from edgeprune.pruning.surgery import check_removal
    from edgeprune.search.scoring import scoring_decision
    from edgeprune.serialization import write_json_atomic
    from edgeprune.tasks import bundled_model_path
    from edgeprune.tasks.compatibility import check_model_folder

    if sum(value is not None for value in (args.plan, args.scores, args.joint_parameters, args.joint_ratio)) != 1:
        raise UserInputError("prune needs one of --scores (from `edgeprune score`), --plan (a plan JSON), --params N "
                             "or --ratio R (heads and FFN neurons planned jointly)")
    if args.joint_ratio is not None and not 0 < args.joint_ratio < 1:
        raise UserInputError(f"--ratio must be between 0 and 1 (a fraction of the heads' and FFN's parameters), "
                             f"got {args.joint_ratio:g}")
    quiet_libraries(args)  # the bundled SmolLM2 is dequantized on first use, before the task is built
    # the bundled task's model (MiniLM, or SmolLM2 for smollm2-bbc), or a folder or a cached Hugging Face id
    model_path = bundled_model_path(args.task) if args.model is None else model_folder(args.model)
    check_model_folder(model_path)
    check_output_folder(args.out)
    if args.plan_out is not None:
        check_output_file(args.plan_out, "--plan-out")
    for flag, value, least in (("--remove", args.remove, 0), ("--remove-per-layer", args.remove_per_layer, 0),
                               ("--min-heads-per-layer", args.min_heads_per_layer, 1),
                               ("--heads-multiple", args.heads_multiple, 1), ("--examples", args.examples, 1),
                               ("--params", args.joint_parameters, 0), ("--ffn-multiple", args.ffn_multiple, 1)):
        if value is not None and value < least:
            raise UserInputError(f"{flag} must be at least {least}, got {value}")
    if args.joint_parameters is not None or args.joint_ratio is not None:
        return run_joint_prune(args, model_path)
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
        # with the model's grouped-query layout: removals snap to whole KV groups or the same number per group
        constraints = Constraints.for_model(model, args.min_heads_per_layer, args.heads_multiple)
        decision = scoring_decision(scores)  # scores chosen by measurement carry their normalization
        normalize = args.normalize or (decision.choice.normalize if decision else choice.normalize)
        plan = plan_heads(args.strategy, scores.normalize_per_layer(normalize), amount, constraints)
    check_removal(model, plan.removed_heads)  # a plan that does not fit: one line, before anything runs
    compensate = choice.compensate if args.compensate is None else args.compensate
    batches = calibration_inputs(args) if compensate else None
    model = prune(model, plan, batches, compensate=compensate)
    write_json_atomic(args.plan_out or args.out / "plan.json", plan.to_dict())
    save(model, args.out)
    if args.json:
        print(json.dumps({"model": str(args.out), "plan": str(args.plan_out or args.out / "plan.json"),
                          "heads_removed": plan.heads_removed, "heads": sum(plan.num_heads),
                          "compensated": compensate}, indent=2))
        return EXIT_OK
    how = "their mean outputs folded into the output bias" if compensate else "removed outright"
    print(f"removed {plan.heads_removed} of {sum(plan.num_heads)} heads ({how}); wrote {args.out}")
    return EXIT_OK


def run_joint_prune(args: SimpleNamespace, model_path: Path) -> int:
    """`prune --params N` / `--ratio R`: heads and FFN neurons planned and removed together
    (`pruning.prune_jointly`)."""
    from edgeprune.models.io import load, save
    from edgeprune.pruning import prunable_parameters, prune_jointly
    from edgeprune.serialization import to_jsonable, write_json_atomic

    flag = "--params" if args.joint_parameters is not None else "--ratio"
    if args.compensate is False:
        raise UserInputError(f"{flag} plans with the removed units' mean outputs folded in; drop --no-compensate")
    model = load(model_path)
    dense = sum(p.numel() for p in model.parameters())
    parameters = args.joint_parameters
    if parameters is None:
        parameters = math.ceil(args.joint_ratio * prunable_parameters(model))
    plan = prune_jointly(model, calibration_inputs(args), parameters, args.min_heads_per_layer, args.ffn_multiple)
    plan_file = args.plan_out or args.out / "plan.json"
    write_json_atomic(plan_file, to_jsonable(plan.structure))
    save(model, args.out)
    widths = [len(kept) for kept in plan.structure.ffn_kept]
    if args.json:
        print(json.dumps({"model": str(args.out), "plan": str(plan_file), "parameters": dense, "asked": parameters,
                          "parameters_removed": plan.parameters_removed, "heads_removed": plan.heads_removed,
                          "heads": sum(plan.structure.heads.num_heads), "neurons_removed": plan.neurons_removed,
                          "ffn_widths": widths, "compensated": True}, indent=2))
        return EXIT_OK
    print(f"removed {plan.parameters_removed:,} of {dense:,} parameters: {plan.heads_removed} of "
          f"{sum(plan.structure.heads.num_heads)} heads and {plan.neurons_removed} FFN neurons (widths {widths}), "
          f"their mean outputs folded into the output biases; wrote {args.out}")
    return EXIT_OK


def calibration_inputs(args: SimpleNamespace) -> list[dict]:
    """The model inputs of the task's first `--examples` calibration documents, batched as fit batches them."""
    try:
        task = task_from(args)
        from edgeprune.tasks.base import input_batches
        return input_batches(task, "calibration", CALIBRATION_BATCH_SIZE, limit=args.examples)
    except UserInputError as error:
        raise UserInputError(f"{error} (prune measures the removed heads' mean outputs on the task's calibration "
                             "data, as fit does; --no-compensate removes them outright and needs no data)") from None
