"""What a fit computes that does not depend on the device, kept so that the other devices of a fleet reuse it.

An artifact depends on structure × recipe × runtime, never on the board it will run on; so do the teacher, the
head and FFN scores, the head means, the PyTorch estimates and the quality measured through the runtime. Only
benchmarks (and the search's decisions, which follow from them and the budgets) are per device. A `SharedWork`
holds those device-independent results in memory for one process; exported files are shared through the
content-keyed export cache on disk (`task.cache_dir / "exports"`) already.
"""

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from edgeprune.importance import HeadScores
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.tasks.base import Quality, Teacher


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
    layouts: dict = field(default_factory=dict)  # Shape → ParameterLayout
    payload: dict = field(default_factory=dict)  # (recipe, Shape) → payload bytes
    flops: dict = field(default_factory=dict)
    core: dict = field(default_factory=dict)
    recovered: dict[int, nn.Module] = field(default_factory=dict)  # heads removed → recovered model
    trimmed: nn.Module | None = None  # the teacher with the trimmed vocabulary
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
