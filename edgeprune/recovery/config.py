"""The knobs of a distillation run, as a dataclass that round-trips through JSON."""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from edgeprune.errors import UserInputError
from edgeprune.recovery.precision import PRECISIONS
from edgeprune.serialization import from_jsonable, to_jsonable

ALIGNMENTS = ("cosine", "mse")


@dataclass(frozen=True)
class DistillConfig:
    """Loss weights, optimizer, schedule, early stopping and budgets for `distill`.

    loss = task_weight · task loss + kd_weight · T² · KL(teacher_T ‖ student_T)
           + embedding_weight · embedding alignment + hidden_weight · hidden-state MSE
    """

    task_weight: float = 1.0  # cross-entropy on labels (classification) or next-token loss (causal LM)
    kd_weight: float = 1.0
    temperature: float = 2.0
    embedding_weight: float = 1.0  # pooled embedding of EncoderClassifier-like models
    embedding_loss: str = "cosine"  # "cosine" (1 - cos) or "mse"
    hidden_weight: float = 0.0  # per-layer hidden states, student layer i against teacher layer layer_map[i]
    layer_map: list[int] | None = None  # None: same depth, layer i against layer i
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 20
    max_grad_norm: float = 1.0
    max_steps: int = 300
    max_epochs: int | None = None
    max_seconds: float | None = None
    dropout: bool = False  # train the student with its dropout on (off: short recoveries on little data drift less)
    # the student's training arithmetic: float32, bfloat16 (autocast, float32 weights and optimizer state), or auto:
    # bfloat16 where the hardware computes in it natively (`edgeprune.recovery.precision`)
    precision: str = "auto"
    # a recipe whose 4-bit grid the student trains through (straight-through) and is left on, so that its artifact
    # holds the recovered weights exactly (edgeprune/recovery/weight_grid.py): litert-int4; None: float weights
    quantization_aware: str | None = None
    eval_every: int = 50  # optimizer steps between validation passes
    patience: int = 3  # validation passes without improvement before stopping; 0 = never stop early
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("task_weight", "kd_weight", "embedding_weight", "hidden_weight", "weight_decay"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise UserInputError(f"distill config: {name} must be a finite number >= 0, got {value}")
        if self.task_weight + self.kd_weight + self.embedding_weight + self.hidden_weight == 0:
            raise UserInputError("distill config: every loss weight is 0; nothing to learn from")
        if not self.temperature > 0:
            raise UserInputError(f"distill config: temperature must be > 0, got {self.temperature}")
        if self.embedding_loss not in ALIGNMENTS:
            raise UserInputError(f"distill config: embedding_loss must be one of {ALIGNMENTS}, "
                                 f"got {self.embedding_loss!r}")
        if not self.learning_rate > 0:
            raise UserInputError(f"distill config: learning_rate must be > 0, got {self.learning_rate}")
        for name in ("warmup_steps", "patience"):
            if getattr(self, name) < 0:
                raise UserInputError(f"distill config: {name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_steps", "eval_every"):
            if getattr(self, name) < 1:
                raise UserInputError(f"distill config: {name} must be at least 1, got {getattr(self, name)}")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise UserInputError(f"distill config: max_epochs must be at least 1, got {self.max_epochs}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise UserInputError(f"distill config: max_seconds must be > 0, got {self.max_seconds}")
        if self.precision not in PRECISIONS:
            raise UserInputError(f"distill config: precision must be one of {', '.join(PRECISIONS)}, "
                                 f"got {self.precision!r}")
        if not self.max_grad_norm > 0:
            raise UserInputError(f"distill config: max_grad_norm must be > 0, got {self.max_grad_norm}")
        if self.quantization_aware is not None:
            from edgeprune.recovery.weight_grid import grid_of

            grid_of(self.quantization_aware)  # a recipe with such a grid, or one clean line
        if self.layer_map is not None and any(i < 0 for i in self.layer_map):
            raise UserInputError(f"distill config: layer_map entries must be teacher layer indices, "
                                 f"got {self.layer_map}")

    def replace(self, **changes: Any) -> "DistillConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DistillConfig":
        if not isinstance(data, dict):
            raise UserInputError(f"distill config must be a JSON object, got {type(data).__name__}")
        try:
            return from_jsonable(cls, data)
        except (TypeError, ValueError) as error:
            if isinstance(error, UserInputError):
                raise
            raise UserInputError(f"distill config: {error}") from None


@dataclass
class DistillResult:
    """What a distillation run did. `best_metric` is the validation metric of the weights it kept."""

    metric: str  # "accuracy" (classification with labels) or "neg_kl" (minus the KL to the teacher)
    initial_metric: float  # the student before any step
    best_metric: float
    best_step: int  # 0: no step improved on the starting weights, which were restored
    steps: int
    epochs: int
    seconds: float
    stopped: str  # "max_steps" | "max_seconds" | "max_epochs" | "early_stop"
    history: list[dict[str, float]] = field(default_factory=list)  # one entry per validation pass
    config: DistillConfig = field(default_factory=DistillConfig)
    precision: str = "float32"  # what the student trained in (config.precision resolved on this hardware)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DistillResult":
        return from_jsonable(cls, data)
