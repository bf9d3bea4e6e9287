"""What a fit produces: every trial, the dense baseline and the chosen artifact, all JSON-ready."""

from dataclasses import dataclass, field
from typing import Any

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.export.verify import Verification
from edgeprune.search.budget import Budget


@dataclass
class Trial:
    """One candidate the search considered: recipe × heads removed, and what happened to it."""

    recipe: str
    heads_removed: int
    predicted_bytes: int
    file_bytes: int | None = None  # None: skipped by the size model, never exported
    fits: bool | None = None
    export_seconds: float | None = None
    cached_export: bool = False
    note: str = ""


@dataclass
class BuiltArtifact:
    """An exported, verified artifact with what was measured about it."""

    label: str
    recipe: str
    path: str
    plan: dict[str, Any]
    parameters: int
    file_bytes: int
    predicted_bytes: int
    verification: Verification
    test_accuracy: float | None = None  # measured through the runtime on the test split
    vocabulary_size: int | None = None  # rows kept when the vocabulary was trimmed (inputs go through the map)
    benchmark: BenchmarkResult | None = None


@dataclass
class FitResult:
    status: str  # "fit" or "budget_not_met"
    message: str
    device: str
    budget: Budget
    task: dict[str, Any]
    teacher_test_accuracy: float  # dense teacher in PyTorch
    head_scores: dict[str, Any]
    dense: BuiltArtifact
    fitted: BuiltArtifact
    trials: list[Trial]
    reproduce: dict[str, Any]
    out_dir: str
    elapsed_s: float
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.status == "fit"
