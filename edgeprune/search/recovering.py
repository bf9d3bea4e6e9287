"""Recovery inside fit: a candidate structure that is built — heads, FFN neurons, whole layers, and any combination
— is distilled from the dense teacher before it is quantized. By default (`--recover-steps auto`) only where it
pays: when the structure's unrecovered PyTorch estimate falls short of the dense teacher's by more than the tie
tolerance (a structure within it would be chosen as it is, so distilling it buys nothing the search can see);
`--recover-steps N` distils every pruned structure built, N steps; 0 none.

Recovery is spent only where a candidate is built, and reuses work along a line of the search space: structures
with the same FFN fraction and the same layers removed differ only in heads, and their global top-k head plans
nest (a plan with more heads removed keeps a subset of the heads of one with fewer), so a structure starts from
the recovered weights of the nearest one before it on its line, with the extra heads cut from those weights,
instead of from the teacher. A trimmed vocabulary is recovered at the full vocabulary and trimmed afterwards
(trimming keeps every token of the task's data, so distillation sees the same inputs either way).

Recovered weights are kept in the fit's work folder (`recovered/KEY.pt`, written whole before the recovery is
journaled), so a resumed fit takes them back instead of distilling again, and a structure recovered later on the
line starts from the same weights as in an uninterrupted fit. The folder is removed when the fit ships.

The PyTorch estimate of a structure is a bound on its artifacts only when it is measured on the model that is
exported: after recovery. The unrecovered estimate is not one (recovery lifts quality, most where most was
removed). So the searcher orders candidates by the estimate but closes lines on `bound`: after recovery, the
recovered model's quality; before, the worst recovered quality of the structures it is at least as compressed
as, plus the most that rule was seen to fail by.
"""

import copy
import dataclasses
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import prune_heads
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.search.journal import Journal
from edgeprune.search.options import AUTO, FitOptions
from edgeprune.search.recipe_estimates import is_recipe_key
from edgeprune.search.result import RecoveryCost
from edgeprune.search.shared import RecoveredModel, SharedWork, calibration_inputs
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable, write_bytes_atomic
from edgeprune.tasks.base import Quality, Task, batched_quality

if TYPE_CHECKING:
    from edgeprune.recovery import DistillConfig, DistillResult
    from edgeprune.recovery.teacher_outputs import TeacherOutputs
    from edgeprune.search.shape_facts import ShapeFacts


class RecoveringBuilder(Protocol):
    """What recovery uses of `edgeprune.search.builder.CandidateBuilder`."""

    teacher: nn.Module
    task: Task
    options: FitOptions
    progress: Progress
    journal: Journal
    shared: SharedWork
    means: HeadOutputMeans | None
    facts: "ShapeFacts"  # the plans, removed layers and pruned models of shapes

    def proxy(self, shape: Shape) -> Quality: ...

    def unrecovered_proxy(self, shape: Shape) -> Quality: ...

    def tolerance(self) -> float: ...


RECOVERED = "-recovered"


def recovered_key(shape: Shape) -> str:
    """The journal key of a structure's PyTorch estimate measured after recovery."""
    return f"{shape.structure.key}{RECOVERED}"


def needs_recovery(builder: RecoveringBuilder, shape: Shape) -> bool:
    """Whether fit distils this candidate before export: recovery is on, the shape removes something, and (under
    "auto") pruning cost it more than the tie tolerance (`pruning_cost`). A function of the journaled estimates,
    so a resumed fit decides the same."""
    options = builder.options
    if options.recovery_steps == 0 or shape.structure == Shape():
        return False
    return not options.recovery_when_it_pays or pruning_cost(builder, shape) > builder.tolerance()


def pruning_cost(builder: RecoveringBuilder, shape: Shape) -> float:
    """How much validation quality (in the metric's units, higher better) the structure's unrecovered PyTorch
    estimate loses against the dense teacher's."""
    return signed_value(builder.unrecovered_proxy(Shape())) - signed_value(builder.unrecovered_proxy(shape))


def recovered_qualities(builder: RecoveringBuilder) -> dict[str, Quality]:
    """Structure key → PyTorch validation quality after recovery, for every structure recovered in this fit (or
    for another device of the fleet)."""
    records = {**builder.shared.proxies, **builder.journal.proxies}
    return {key.removesuffix(RECOVERED): from_jsonable(Quality, quality) for key, quality in records.items()
            if key.endswith(RECOVERED)}


def unrecovered_estimates(builder: RecoveringBuilder) -> dict[str, Quality]:
    """Structure key → PyTorch validation quality of the teacher pruned to it (no recovery), for every structure
    measured so far in this fit (or for another device of the fleet)."""
    records = {**builder.shared.proxies, **builder.journal.proxies}
    return {key: from_jsonable(Quality, quality) for key, quality in records.items()
            if not key.endswith(RECOVERED) and not is_recipe_key(key)}


def bound(builder: RecoveringBuilder, shape: Shape) -> Quality:
    """What an artifact of this structure can measure at most, as the search may close lines on. Without
    recovery, its PyTorch estimate (quantization only takes away). With recovery, the estimate measured after
    recovery once the structure is recovered; before (its unrecovered estimate bounds nothing), the worst
    recovered quality of the structures it is at least as compressed as, the dense teacher's included — the
    search's own assumption that quality does not rise with compression (`edgeprune.search.space`) — plus the
    most that assumption is seen to fail by: how far any recovered structure measures above the same figure
    for it (a student can beat its teacher on validation: seen on a random small BERT)."""
    if not needs_recovery(builder, shape):
        return builder.proxy(shape)
    recovered = recovered_qualities(builder)
    if shape.structure.key in recovered:
        return recovered[shape.structure.key]
    teacher = builder.proxy(Shape())
    measured = {Shape.from_key(key): signed_value(quality) for key, quality in recovered.items()}
    measured[Shape()] = signed_value(teacher)

    def worst_below(structure: Shape) -> float:
        return min(value for other, value in measured.items()
                   if other != structure and structure.at_least_as_compressed_as(other))

    excess = max([0.0, *(value - worst_below(other) for other, value in measured.items() if other != Shape())])
    value = worst_below(Shape.from_key(shape.structure.key)) + excess  # FFN fractions as rounded in the keys
    return dataclasses.replace(teacher, value=value if teacher.higher_is_better else -value)


def signed_value(quality: Quality) -> float:
    """Higher is better, whatever the metric."""
    return quality.value if quality.higher_is_better else -quality.value


def line_parent(builder: RecoveringBuilder, shape: Shape) -> Shape | None:
    """The recovered structure nearest before `shape` on its line (same FFN fraction and layers, fewer heads
    removed) whose kept heads include all of this shape's; None when there is none."""
    kept = [set(layer) for layer in builder.facts.plan(shape.heads_removed, shape.layers_removed).kept_heads]
    parents = [s for s in builder.shared.recovered
               if s.ffn_fraction == shape.ffn_fraction and s.layers_removed == shape.layers_removed
               and s.heads_removed < shape.heads_removed
               and all(mine <= set(theirs) for mine, theirs in zip(
                   kept, builder.facts.plan(s.heads_removed, s.layers_removed).kept_heads, strict=True))]
    return max(parents, key=lambda s: s.heads_removed, default=None)


def may_start_from(structure: Shape, other: Shape) -> bool:
    """Whether a recovered `other` may be where `structure`'s recovery starts (`line_parent`): the same line,
    fewer heads removed (whether the plans nest is not checked: this errs towards yes)."""
    return (other.ffn_fraction, other.layers_removed) == (structure.ffn_fraction, structure.layers_removed) \
        and other.heads_removed < structure.heads_removed


def heads_beyond(model: nn.Module, kept_heads: list[list[int]], layers_removed: list[int]) -> dict[int, list[int]]:
    """What to remove from `model` (a pruned model whose layers `layers_removed` are gone) to keep only
    `kept_heads` (per dense layer, dense head indices): {the model's layer index: dense head indices}."""
    blocks = adapter_for(model).attention_blocks(model)
    stayed = [layer for layer in range(len(kept_heads)) if layer not in set(layers_removed)]
    removal = {}
    for index, (block, dense_layer) in enumerate(zip(blocks, stayed, strict=True)):
        extra = sorted(set(block.original_heads) - set(kept_heads[dense_layer]))
        if extra:
            removal[index] = extra
    return removal


def recover(builder: RecoveringBuilder, shape: Shape) -> nn.Module:
    """The structure of `shape` distilled from the dense teacher (with the full vocabulary), kept in
    `builder.shared.recovered` for later candidates and other devices of a fleet; its PyTorch validation
    quality is measured after recovery and journaled as the structure's bound."""
    structure = shape.structure
    if structure in builder.shared.recovered:
        return builder.shared.recovered[structure].model
    resumed = recovered_before(builder, structure)
    if resumed is not None:
        return resumed
    student, parent = recovery_start(builder, structure)
    if parent is not None:
        builder.progress.note(f"  recovering from the recovered candidate with {parent.describe()}")
    result, quality = run_recovery(student, builder.teacher, builder.task, builder.options, builder.progress,
                                   teacher_outputs(builder))
    return record_recovery(builder, structure, student, parent, result, quality)


def recovery_start(builder: RecoveringBuilder, structure: Shape) -> tuple[nn.Module, Shape | None]:
    """What recovering `structure` starts from: a copy of the recovered structure nearest before it on its line
    with the extra heads cut (and that parent), else the teacher pruned to it (and None)."""
    parent = line_parent(builder, structure)
    if parent is None:
        return builder.facts.pruned(structure), None
    student = copy.deepcopy(builder.shared.recovered[parent].model)
    plan = builder.facts.plan(structure.heads_removed, structure.layers_removed)
    removal = heads_beyond(student, plan.kept_heads, builder.facts.removed_layers(structure.layers_removed))
    # the recovered parent's own head means: its heads no longer output what the teacher's did
    inputs = calibration_inputs(builder.task, builder.options) if builder.means is not None else None
    prune_heads(student, removal, compensate=inputs)
    return student, parent


def teacher_outputs(builder: RecoveringBuilder) -> "TeacherOutputs":
    """The teacher's outputs on the recovery batches, kept for this fit's later recoveries (each sees the same
    batches: the same seed shuffles the calibration split the same way) and for the fleet's other devices."""
    from edgeprune.recovery.teacher_outputs import TeacherOutputs

    kept = builder.shared.teacher_outputs
    if kept is None or kept.teacher is not builder.teacher:
        builder.shared.teacher_outputs = kept = TeacherOutputs(builder.teacher)
    return kept


def settle_quantization_aware(options: FitOptions, teacher: nn.Module, recipes: Sequence[str],
                              progress: Progress) -> FitOptions:
    """`options` with an "auto" quantization-aware recovery settled for this fit's `teacher` and ladder `recipes`
    (`weight_grid.grid_for_recovery`); said when the students will train on a grid."""
    from edgeprune.recovery.weight_grid import grid_for_recovery

    if options.recovery_quantization_aware != AUTO:
        return options
    grid = grid_for_recovery(teacher, recipes) if options.recover_steps != 0 else None  # 0: nothing is recovered
    if grid is not None:
        progress.note(f"the teacher's weights lie on {grid}'s 4-bit grid: recovered students train on it and stay "
                      "on it (--recover-quantization-aware none: in float)")
    return dataclasses.replace(options, recovery_quantization_aware=grid)


def recovery_config(task: Task, options: FitOptions) -> "DistillConfig":
    """The distillation settings of fit's recoveries: `options.recovery_steps` steps, three validation passes, a
    short warm-up, the task's seed and recovery settings, `options.recovery_precision` and
    `options.recovery_quantization_aware`."""
    from edgeprune.recovery import DistillConfig

    steps = options.recovery_steps
    # "auto" is fit's to settle against its teacher (`weight_grid.grid_for_recovery`); left unsettled, float students
    quantization_aware = None if options.recovery_quantization_aware == AUTO else options.recovery_quantization_aware
    return DistillConfig(max_steps=steps, eval_every=max(1, steps // 3), warmup_steps=min(20, steps // 5),
                         seed=task.seed, precision=options.recovery_precision,
                         quantization_aware=quantization_aware, **task.recovery_settings)


def run_recovery(student: nn.Module, teacher: nn.Module, task: Task, options: FitOptions, progress: Progress,
                 teacher_outputs: "TeacherOutputs | None" = None) -> tuple["DistillResult", Quality]:
    """Distil `student` in place from the dense teacher for `options.recovery_steps` steps; what the distillation
    did and the student's PyTorch validation quality after. A function of its inputs (the teacher's outputs
    are kept in `teacher_outputs` when given, and read from it when there): a Ray worker runs it for a build
    ahead (`edgeprune.search.build_job`)."""
    from edgeprune.recovery import DistillData, distill

    data = DistillData.from_task(task, options.recovery_batch_size or task.recovery_batch_size, task.seed,
                                 validation_limit=task.recovery_validation_limit)
    result = distill(student, teacher, data, recovery_config(task, options), progress, teacher_outputs)
    student.eval()
    return result, batched_quality(task, student, "validation")


def record_recovery(builder: RecoveringBuilder, structure: Shape, student: nn.Module, parent: Shape | None,
                    result: "DistillResult", quality: Quality) -> nn.Module:
    """Keep a recovered structure (recovered here or on a worker) for later candidates and the fleet, and
    journal its validation quality as the structure's bound."""
    before = builder.unrecovered_proxy(structure)
    start = f"the recovered weights of {parent.describe()}" if parent is not None else "the pruned teacher"
    kept = RecoveredModel(student, (
        f"distilled from the dense teacher for {builder.options.recovery_steps} steps in {result.precision} "
        f"({result.seconds:.0f} s), "
        f"starting from {start}; validation {quality.metric} in PyTorch {before.value:.4f} before, "
        f"{quality.value:.4f} after"), result.seconds)
    # the weights first, whole, then the journal record that says they are there: a fit stopped in between
    # recovers the structure again, one stopped after takes them back (`recovered_before`)
    buffer = io.BytesIO()
    torch.save({"state": student.state_dict(), "description": kept.description, "seconds": kept.seconds}, buffer)
    write_bytes_atomic(recovered_weights_file(builder, structure), buffer.getvalue())
    builder.journal.record_proxy(recovered_key(structure), to_jsonable(quality))
    builder.shared.proxies[recovered_key(structure)] = builder.journal.proxies[recovered_key(structure)]
    builder.shared.recovered[structure] = kept
    builder.progress.note(f"  recovered {structure.describe()} in {result.seconds:.0f} s: distillation "
                          f"{result.metric} {result.initial_metric:.4f} → {result.best_metric:.4f}; validation "
                          f"{quality.metric} {before.value:.4f} → {quality.value:.4f} in PyTorch (the structure's "
                          "bound from now on)")
    return student


RECOVERED_FOLDER = "recovered"  # in the fit's work folder


def recovered_weights_file(builder: RecoveringBuilder, structure: Shape) -> Path:
    """Where a fit keeps the recovered weights of `structure` until it ships."""
    return builder.journal.path.parent / RECOVERED_FOLDER / f"{structure.key}.pt"


def recovered_before(builder: RecoveringBuilder, structure: Shape) -> nn.Module | None:
    """The weights an earlier session of this fit recovered for `structure` (journaled, kept in the work folder),
    loaded into the structure's architecture and kept as if recovered now; None when there are none (or they do
    not load: one warning, and the structure is recovered again)."""
    path = recovered_weights_file(builder, structure)
    if recovered_key(structure) not in builder.journal.proxies or not path.is_file():
        return None
    model = builder.facts.pruned(structure)
    try:
        saved = torch.load(io.BytesIO(path.read_bytes()), weights_only=True)
        model.load_state_dict(saved["state"])
    except Exception as error:  # noqa: BLE001 - a damaged or foreign file: recovering again loses only time
        builder.progress.warn(f"the recovered weights {path} do not load ({type(error).__name__}); recovering "
                              f"{structure.describe()} again")
        return None
    model.eval()
    builder.shared.recovered[structure] = RecoveredModel(model, saved["description"], float(saved["seconds"]))
    builder.shared.proxies[recovered_key(structure)] = builder.journal.proxies[recovered_key(structure)]
    builder.progress.note(f"  {structure.describe()}: recovered before (resumed)")
    return model


def recovery_cost(builder: RecoveringBuilder, fitted: Shape) -> RecoveryCost:
    """What recovery cost in this fit (structures, seconds) and bought the fitted structure."""
    options = builder.options
    mode = "off" if options.recovery_steps == 0 else "auto" if options.recovery_when_it_pays else \
        "every pruned candidate"
    recovered = recovered_qualities(builder)
    seconds = sum(kept.seconds for kept in builder.shared.recovered.values())
    after = recovered.get(fitted.structure.key) if needs_recovery(builder, fitted) else None
    before = builder.unrecovered_proxy(fitted) if after is not None else None
    return RecoveryCost(mode, options.recovery_steps, len(recovered), round(seconds, 1), before, after,
                        builder.unrecovered_proxy(Shape()))
