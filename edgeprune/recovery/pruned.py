"""Recover a pruned encoder or decoder by distillation from its task's dense teacher, optionally after removing its
most redundant layers (angular distance) and a share of its FFN neurons; and the folder `edgeprune distill` writes."""

import copy
import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.classifier import CausalLMLogits, EncoderClassifier
from edgeprune.models.io import save
from edgeprune.progress import Progress
from edgeprune.pruning.ffn import NEURON_CRITERIA, intermediate_sizes
from edgeprune.pruning.structure import StructurePlan, apply_structure
from edgeprune.recovery.config import DistillConfig, DistillResult
from edgeprune.recovery.data import DistillData
from edgeprune.recovery.distill import distill
from edgeprune.recovery.schedules import ffn_removal, redundant_layers
from edgeprune.serialization import write_json_atomic

if TYPE_CHECKING:
    from edgeprune.tasks.base import Task

# copied next to the recovered model, from the student's folder or else the teacher's, so the folder tokenizes alone
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


@dataclass
class PrunedDistillation:
    """What `distill_pruned` did: the recovered model, the distillation and the structure it removed first."""

    # the pruned encoder and a copy of the teacher's head, or the pruned decoder as its generator; distilled (eval)
    student: EncoderClassifier | CausalLMLogits
    result: DistillResult
    task: str  # the task's name
    teacher_folder: Path  # the task's model folder (tokenizer files come from here when the student's has none)
    teacher_validation_accuracy: float
    source: Path | None = None  # the folder the student encoder was loaded from, if any
    removed_layers: list[int] | None = None  # dense layer indices removed before distilling
    layer_map: list[int] | None = None  # student layer i ↔ teacher layer layer_map[i]
    ffn_ratio: float | None = None  # share of each layer's FFN neurons removed
    ffn_criterion: str | None = None
    intermediate_sizes: list[int] | None = None  # FFN widths after removal (set when any structure was removed)

    def structure(self) -> dict[str, Any]:
        """The structure facts as distill.json records them: only what was removed."""
        facts: dict[str, Any] = {}
        if self.removed_layers is not None:
            facts["removed_layers"] = self.removed_layers
            facts["layer_map"] = self.layer_map
        if self.ffn_ratio is not None:
            facts["ffn_ratio"] = self.ffn_ratio
            facts["ffn_criterion"] = self.ffn_criterion
        if self.intermediate_sizes is not None:
            facts["intermediate_sizes"] = self.intermediate_sizes
        return facts

    def to_dict(self) -> dict[str, Any]:
        """The content of distill.json."""
        return {"student": None if self.source is None else str(self.source), "task": self.task,
                "teacher_validation_accuracy": self.teacher_validation_accuracy, **self.structure(),
                "result": self.result.to_dict()}


def distill_pruned(student_encoder: nn.Module, task: "Task", config: DistillConfig | None = None, *,
                   remove_layers: int = 0, ffn_ratio: float = 0.0, ffn_criterion: str = "activation",
                   scoring_batches: int = 8, batch_size: int | None = None, train_limit: int | None = None,
                   validation_limit: int | None = None, source: Path | None = None,
                   progress: Progress | None = None, compensate: bool = True) -> PrunedDistillation:
    """Recover `student_encoder` (a pruned copy of the task's model, changed in place) by distilling from the
    task's dense teacher: an `EncoderClassifier` whose head the student starts from, or a decoder's
    `CausalLMLogits`. `config`, `batch_size` and `validation_limit` default to the task's recovery settings
    (`Task.recovery_*`: DistillConfig's defaults, 16 and all for an encoder; a decoder's own), as in fit.

    First, optionally, the `remove_layers` consecutive layers that change the hidden states least on
    `scoring_batches` calibration batches go (the student's layers are then aligned with the teacher's kept
    layers for hidden-state losses), and `ffn_ratio` of every layer's FFN neurons, scored by `ffn_criterion`
    (one of `edgeprune.pruning.ffn.NEURON_CRITERIA`) on the student as it came; both are removed by one
    `apply_structure`, the removed neurons' mean outputs folded into the FFN output biases when `compensate`
    (as `fit` does). Training reads the task's calibration split (the first
    `train_limit` documents) and stops early on its validation split (the first `validation_limit`). `source`,
    the folder the encoder came from, is named in messages and recorded by `save_distilled`. Notes go to
    `progress` (default: the task's).
    """
    config = config or DistillConfig(**task.recovery_settings)
    batch_size = batch_size if batch_size is not None else task.recovery_batch_size
    validation_limit = validation_limit if validation_limit is not None else task.recovery_validation_limit
    _check_options(remove_layers, ffn_ratio, ffn_criterion, scoring_batches, batch_size, train_limit,
                   validation_limit)
    layers = len(adapter_for(student_encoder).layer_modules(student_encoder))
    if remove_layers and remove_layers >= layers:
        raise UserInputError(f"--remove-layers {remove_layers}: the model has {layers} layers, so 1..{layers - 1} "
                             "can go")
    if ffn_ratio:
        intermediate_sizes(student_encoder)  # refuses families without FFN neuron removal before any work
    progress = progress or task.progress
    dense = task.teacher()
    teacher = dense.model
    student = student_for(teacher, student_encoder, task, source)
    data = DistillData.from_task(task, batch_size, config.seed, train_limit, validation_limit)
    scoring = data.scoring_batches(scoring_batches)
    facts: dict[str, Any] = {}
    # layers and FFN neurons are both chosen on the student as it came, then removed in one apply_structure
    removal = redundant_layers(student, scoring(), remove_layers) if remove_layers else None
    gone = removal.removed if removal else []
    if ffn_ratio:
        ffn_removal(student, ffn_ratio, ffn_criterion, scoring, compensate, gone)
        facts.update(ffn_ratio=ffn_ratio, ffn_criterion=ffn_criterion)
    elif gone:
        apply_structure(student, StructurePlan(layers_removed=gone))
    if removal:
        progress.note(f"removed layers {removal.removed} (angular distance)")
        facts.update(removed_layers=removal.removed, layer_map=removal.layer_map)
        # the student's layers map to the teacher's kept layers, for hidden-state alignment
        if len(removal.layer_map) + len(removal.removed) == len(adapter_for(teacher).layer_modules(teacher)):
            config = dataclasses.replace(config, layer_map=removal.layer_map)
    if facts:
        facts["intermediate_sizes"] = intermediate_sizes(student)
    result = distill(student, teacher, data, config, progress)
    student.eval()  # ready to evaluate or export, as edgeprune.load returns models
    return PrunedDistillation(student, result, task.name, Path(task.model_path), dense.validation_accuracy,
                              source=source, **facts)


def student_for(teacher: nn.Module, pruned: nn.Module, task: "Task", source: Path | None) -> nn.Module:
    """The pruned model wrapped as the teacher is: beside a copy of an encoder teacher's head, or as a decoder
    teacher's generator (its logits are what a decoder distils on)."""
    if isinstance(teacher, CausalLMLogits):
        width = teacher.model.config.hidden_size
    elif isinstance(teacher, EncoderClassifier):
        width = teacher.classifier.in_features
    else:
        raise UserInputError(f"task {task.name} has a {type(teacher).__name__} teacher; `distill` recovers pruned "
                             "encoders with a linear head (EncoderClassifier) and decoders (CausalLMLogits)")
    hidden = getattr(pruned.config, "hidden_size", None)
    if hidden != width:
        raise UserInputError(f"{source or 'the student'} has hidden size {hidden} but the teacher's {width}; "
                             "distill a model pruned from the task's model")
    if isinstance(teacher, CausalLMLogits):
        return CausalLMLogits(pruned, teacher.context, teacher.attention)
    # a pooler stays: the task mean-pools, so it gets no gradient, and the folder keeps loading with edgeprune.load
    return EncoderClassifier(pruned, copy.deepcopy(teacher.classifier))


def save_distilled(distilled: PrunedDistillation, out: str | Path) -> Path:
    """Write the recovered model to `out` as `edgeprune distill` does: the encoder as a model folder
    (`edgeprune.load` reads it back) and its head as classifier.pt, or the decoder's folder; the tokenizer files,
    the student's plan.json and distill.json (`PrunedDistillation.to_dict`). Returns the folder."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    source = distilled.source
    if isinstance(distilled.student, CausalLMLogits):  # a decoder is its folder (and the source's tokenizer files)
        save(distilled.student.model, out, source=source if source is not None else distilled.teacher_folder)
    else:
        save(distilled.student.encoder, out)
        torch.save(distilled.student.classifier.state_dict(), out / "classifier.pt")
    for name in TOKENIZER_FILES:
        found = source / name if source is not None and (source / name).exists() else distilled.teacher_folder / name
        if found.exists():
            shutil.copy(found, out / name)
    if source is not None and (source / "plan.json").exists():
        shutil.copy(source / "plan.json", out / "plan.json")
    write_json_atomic(out / "distill.json", distilled.to_dict())
    return out


def _check_options(remove_layers: int, ffn_ratio: float, ffn_criterion: str, scoring_batches: int, batch_size: int,
                   train_limit: int | None, validation_limit: int | None) -> None:
    if remove_layers < 0:
        raise UserInputError(f"remove_layers must be >= 0, got {remove_layers}")
    if not 0 <= ffn_ratio < 1:
        raise UserInputError(f"ffn_ratio must be a share of neurons in [0, 1), got {ffn_ratio}")
    if ffn_criterion not in NEURON_CRITERIA:
        raise UserInputError(f"unknown FFN criterion {ffn_criterion!r}; choose from {', '.join(NEURON_CRITERIA)}")
    for name, value in (("scoring_batches", scoring_batches), ("batch_size", batch_size),
                        ("train_limit", train_limit), ("validation_limit", validation_limit)):
        if value is not None and value < 1:
            raise UserInputError(f"{name} must be at least 1, got {value}")
