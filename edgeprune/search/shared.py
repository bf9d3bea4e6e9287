"""What a fit computes that does not depend on the device, kept so that the other devices of a fleet reuse it.

An artifact depends on structure × recipe × runtime, never on the board it will run on; so do the teacher, the
head and FFN scores, the head means, the PyTorch estimates and the quality measured through the runtime. Only
benchmarks (and the search's decisions, which follow from them and the budgets) are per device. A `SharedWork`
holds those device-independent results in memory for one process; exported files are shared through the
content-keyed export cache on disk (`task.cache_dir / "exports"`) already.
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from edgeprune.importance import HeadScores
from edgeprune.pruning.compensation import HeadOutputMeans, measure_head_means
from edgeprune.tasks.base import Quality, Task, Teacher, input_batches

if TYPE_CHECKING:
    from edgeprune.quantize.size_model import ParameterLayout
    from edgeprune.search.options import FitOptions
    from edgeprune.search.space import Shape


@dataclass
class RecoveredModel:
    """A structure distilled from the dense teacher inside fit (`edgeprune.search.recovering`)."""

    model: nn.Module  # at the full vocabulary
    description: str  # how: steps, time, and the recovered weights it started from
    seconds: float = 0.0  # the distillation's


@dataclass
class SharedWork:
    """Device-independent results of one task and one set of fit options, filled by whichever device needs them
    first. `reused` counts what a later device took from here instead of computing (the fleet report says so)."""

    key: str | None = None  # the task and options these belong to (`SharedWork.bind` refuses another)
    teacher: Teacher | None = None
    raw_scores: HeadScores | None = None
    head_means: HeadOutputMeans | None = None
    neurons: Any = None  # NeuronStatistics of the dense teacher
    removed_layers: dict[int, list[int]] = field(default_factory=dict)
    # the ends of the search's lines (`edgeprune.search.shape_facts`): their layouts, and (recipe name, end) →
    # payload bytes, (end,) → FLOPs and (end,) → parameters outside the embeddings
    layouts: dict["Shape", "ParameterLayout"] = field(default_factory=dict)
    payload: dict[tuple[Any, ...], float] = field(default_factory=dict)
    flops: dict[tuple[Any, ...], float] = field(default_factory=dict)
    core: dict[tuple[Any, ...], float] = field(default_factory=dict)
    recovered: dict[Any, RecoveredModel] = field(default_factory=dict)  # structure (a search Shape) → recovered
    trimmed: nn.Module | None = None  # the teacher with the trimmed vocabulary
    teacher_outputs: Any = None  # TeacherOutputs: the teacher's outputs on the recovery batches
    proxies: dict[str, dict[str, Any]] = field(default_factory=dict)  # structure key → PyTorch Quality (JSON)
    runtime_qualities: dict[tuple[str, str], Quality] = field(default_factory=dict)  # (file sha256, split) →
    reused: dict[str, int] = field(default_factory=dict)

    def bind(self, key: str) -> None:
        """Tie this work to a task and options (the first fit that uses it); another is a programming error."""
        if self.key is None:
            self.key = key
        elif self.key != key:
            raise ValueError("this SharedWork holds results of another task or other fit options; a fleet shares "
                             "work only between fits of one task with one set of options")

    def count(self, what: str) -> None:
        self.reused[what] = self.reused.get(what, 0) + 1


def calibration_inputs(task: Task, options: "FitOptions") -> list[dict[str, torch.Tensor]]:
    """The calibration batches a fit scores on, holding only the model's inputs (what head means, neuron
    statistics and layer distances are measured on)."""
    return input_batches(task, "calibration", options.scoring_batch_size, limit=options.scoring_examples)


def dense_head_means(teacher: nn.Module, task: Task, options: "FitOptions", shared: SharedWork) -> HeadOutputMeans:
    """Each head's mean output on the calibration data, measured once on the dense teacher and kept in `shared`
    (another device of a fleet, or another candidate, counts it as reused)."""
    if shared.head_means is None:
        shared.head_means = measure_head_means(teacher, calibration_inputs(task, options))
    else:
        shared.count("head means")
    return shared.head_means
