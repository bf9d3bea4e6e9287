"""What a fit produces: every trial, the dense baseline, every candidate built and the chosen one, all JSON-ready."""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.errors import UserInputError
from edgeprune.export.verify import Verification
from edgeprune.generation.bench import GenerationBenchmark, TeacherAgreement
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.structure import StructurePlan
from edgeprune.quantize.recipes import RECIPES, Recipe
from edgeprune.search.budget import Budget, BudgetCheck
from edgeprune.search.latency import PredictionError, prediction_error
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable, write_json_atomic
from edgeprune.tasks.base import Quality

# 2: typed plan (StructurePlan), recipe (Recipe) and head scores (HeadScores); 3: search_stopped_early; 4: recovery;
# 5: a generator's generation benchmark and teacher agreement
RESULT_FORMAT_VERSION = 5
# a fit's status: every budget met as measured on the device, met on figures estimated here because the device was
# not reachable (see `edgeprune.search.estimate`), or not met
FIT, FIT_ESTIMATED, BUDGET_NOT_MET = "fit", "fit (estimated)", "budget_not_met"


def fit_status(fits: bool, estimated: bool) -> str:
    return (FIT_ESTIMATED if estimated else FIT) if fits else BUDGET_NOT_MET


@dataclass
class Trial:
    """One candidate the search considered (recipe × structure), or a line of the space it never built."""

    recipe: str
    heads_removed: int
    predicted_bytes: int
    file_bytes: int | None = None  # None: skipped by the size model, never exported
    fits: bool | None = None  # met the resource budgets as benchmarked
    export_seconds: float | None = None
    cached_export: bool = False
    note: str = ""
    ffn_fraction: float = 0.0
    layers_removed: int = 0
    trim_vocabulary: bool = False
    estimated_quality: float | None = None  # validation quality of the fp32 structure in PyTorch (the search's bound)

    def describe(self) -> str:
        return Shape(self.heads_removed, self.ffn_fraction, self.layers_removed, self.trim_vocabulary).describe()


@dataclass
class BuiltArtifact:
    """An exported, verified artifact with what was measured about it."""

    label: str
    recipe: Recipe
    path: str
    plan: StructurePlan  # what stays of the teacher, on the teacher's indices
    parameters: int
    file_bytes: int
    predicted_bytes: int
    verification: Verification
    test_accuracy: float | None = None  # accuracy-like metrics only: measured through the runtime on the test split
    vocabulary_size: int | None = None  # rows kept when the vocabulary was trimmed (inputs go through the map)
    benchmark: BenchmarkResult | None = None
    validation_quality: Quality | None = None  # through the runtime; what the search decides on
    quality: Quality | None = None  # through the runtime on the test split (dense and fitted only)
    checks: list[BudgetCheck] = field(default_factory=list)
    export_seconds: float | None = None
    cached_export: bool = False
    ffn_fraction: float = 0.0  # of each kept layer's FFN neurons removed
    layers_removed: list[int] = field(default_factory=list)  # the teacher's layers that were dropped
    note: str = ""  # why it was not evaluated or benchmarked, when it was not
    core_parameters: int = 0  # parameters outside the embedding tables (ties go to the candidate keeping most)
    predicted_latency_ms: float | None = None  # the latency model's p50, predicted just before the benchmark
    latency_basis: str = ""  # what that prediction rested on (edgeprune.search.latency.BASES)
    recovery: str = ""  # how the model was distilled before export (fit's --recover-steps); "" when it was not
    # a generator's greedy continuations against the dense teacher's, through the program (dense and fitted only)
    teacher_agreement: TeacherAgreement | None = None
    # where validation_quality and quality were measured when not through the runtime: a generator's dense fp32
    # baseline takes the teacher's in PyTorch (edgeprune.search.generator_figures.quality_from_pytorch)
    quality_source: str = ""

    @property
    def shape(self) -> Shape:
        """The point of the search space this artifact was built at."""
        return Shape(self.heads_removed, self.ffn_fraction, len(self.layers_removed), self.vocabulary_size is not None)

    @property
    def heads_removed(self) -> int:
        return 0 if self.plan.heads is None else self.plan.heads.heads_removed

    def describe(self) -> str:
        return self.shape.describe()

    @property
    def meets_budget(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)


@dataclass
class RecoveryCost:
    """What fit's recovery cost and bought."""

    mode: str  # "auto" (where pruning cost more than the tie tolerance), "every pruned candidate" or "off"
    steps: int  # of each recovery
    structures: int  # structures distilled, over every session of a resumed fit
    seconds: float  # distillation time in this session (a resumed fit's earlier sessions are not counted)
    fitted_before: Quality | None = None  # the fitted structure's PyTorch validation estimate unrecovered ...
    fitted_after: Quality | None = None  # ... and after its recovery (None: it was not recovered)
    reference: Quality | None = None  # the dense teacher's PyTorch validation estimate "auto" measured costs from

    def describe(self) -> str:
        if self.mode == "off":
            return "Recovery: off (--recover-steps 0)."
        spent = (f"Recovery ({self.mode}, {self.steps} steps each): {self.structures} structure"
                 f"{'' if self.structures == 1 else 's'} distilled, {self.seconds:.0f} s in this session")
        if self.fitted_after is not None and self.fitted_before is not None:
            return (f"{spent}; the fitted structure's validation {self.fitted_after.metric} in PyTorch "
                    f"{self.fitted_before.value:.4f} → {self.fitted_after.value:.4f}.")
        return f"{spent}; the fitted structure was not recovered."


@dataclass
class FitResult:
    status: str  # FIT, FIT_ESTIMATED or BUDGET_NOT_MET
    message: str
    device: str
    budget: Budget
    task: dict[str, Any]
    teacher_test_accuracy: float | None  # dense teacher in PyTorch (accuracy-like metrics)
    head_scores: HeadScores  # what the search ranked heads by (the teacher's, before any removal)
    dense: BuiltArtifact
    fitted: BuiltArtifact
    trials: list[Trial]
    reproduce: dict[str, Any]
    out_dir: str
    elapsed_s: float
    timings_s: dict[str, float] = field(default_factory=dict)
    candidates: list[BuiltArtifact] = field(default_factory=list)  # every exported candidate, the fitted one included
    pareto: list[str] = field(default_factory=list)  # paths of candidates on the quality/size/latency front
    teacher_quality: Quality | None = None  # dense teacher in PyTorch on the test split
    binding_budgets: list[str] = field(default_factory=list)  # budgets nothing met (when status is budget_not_met)
    suggestions: list[str] = field(default_factory=list)  # what would make it fit
    per_class_regressions: list[dict[str, Any]] = field(default_factory=list)  # fitted vs dense teacher, test split
    shipped_files: list[str] = field(default_factory=list)  # what the app needs next to the artifact
    device_profile: dict[str, Any] = field(default_factory=dict)  # hardware and runtime facts of the profile
    quality_tolerance: float = 0.0  # validation qualities this close were a tie, won by the least compressed
    search_stopped_early: str | None = None  # why the search stopped before nothing could win (a time limit)
    recovery: RecoveryCost | None = None  # None in results before format 4
    generation: GenerationBenchmark | None = None  # a shipped generator's, where one was run (generation.json)
    format_version: int = RESULT_FORMAT_VERSION  # of this schema; `load` refuses a newer one

    @property
    def fits(self) -> bool:
        return self.status in (FIT, FIT_ESTIMATED)

    def latency_model_error(self) -> PredictionError:
        """How far the latency model's predictions were from the p50 measured on the device, over every candidate
        benchmarked there (estimated benchmarks say nothing about the model's error, so they are left out)."""
        built = [c for c in self.candidates if c.benchmark is not None and c.benchmark.measured
                 and c.predicted_latency_ms is not None]
        error = prediction_error((c.predicted_latency_ms, c.benchmark.p50_ms) for c in built)
        error.by_basis = dict(Counter(c.latency_basis for c in built))
        return error

    def runtime_comparison(self) -> list[BuiltArtifact]:
        """With candidates of more than one runtime: each runtime's best benchmarked candidate (meeting the budget
        first, then the best validation quality, then the fastest), the fitted runtime first; else []."""
        by_runtime: dict[str, list[BuiltArtifact]] = {}
        for candidate in self.candidates:
            if candidate.benchmark is not None and candidate.validation_quality is not None:
                by_runtime.setdefault(candidate.recipe.runtime, []).append(candidate)
        if len(by_runtime) < 2:
            return []

        def rank(c: BuiltArtifact) -> tuple:
            sign = 1 if c.validation_quality.higher_is_better else -1
            return c.meets_budget, sign * c.validation_quality.value, -c.benchmark.p50_ms

        best = {runtime: self.fitted if self.fitted in found else max(found, key=rank)
                for runtime, found in by_runtime.items()}
        return sorted(best.values(), key=lambda c: c is not self.fitted)

    def save(self, path: str | Path) -> Path:
        """Write result.json atomically (readers never see half a file)."""
        write_json_atomic(Path(path), to_jsonable(self))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "FitResult":
        """Read a result.json written by `fit` (this or an earlier format) back into typed values."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserInputError(f"{path} does not exist; point at the result.json of a finished fit") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UserInputError(f"{path} is not a readable result.json ({error})") from None
        if not isinstance(data, dict):
            raise UserInputError(f"{path} is not a result.json (a JSON object)")
        version = data.get("format_version", 0)  # results before format 1 carried no version
        if not isinstance(version, int) or version > RESULT_FORMAT_VERSION:
            raise UserInputError(f"{path} has result format {version!r}; this edgeprune reads up to "
                                 f"{RESULT_FORMAT_VERSION}: upgrade edgeprune")
        try:
            if version < 2:
                data = upgraded_from_format_1(data)
            data["format_version"] = RESULT_FORMAT_VERSION
            return from_jsonable(cls, data)
        except UserInputError as error:  # e.g. a format-1 recipe name this edgeprune does not register
            raise UserInputError(f"{path}: {error}") from None
        except (KeyError, TypeError, ValueError) as error:
            raise UserInputError(f"{path} does not hold a fit result ({type(error).__name__}: {error})") from None


def upgraded_from_format_1(data: dict[str, Any]) -> dict[str, Any]:
    """A format-1 result (plan, recipe and head scores as plain dicts and names) in format 2's shape.

    Format 1 kept the head plan only; the FFN neurons each candidate kept were not written, so an upgraded plan
    says `ffn_kept=None` and the candidate's `ffn_fraction` stays the record of how much went. Its recipes are
    looked up by name in this edgeprune's registry (an unknown name: the result cannot be read)."""
    def artifact(entry: dict[str, Any]) -> dict[str, Any]:
        entry = dict(entry)
        heads = entry.get("plan") or None
        entry["plan"] = {"format_version": 1, "heads": heads, "ffn_kept": None,
                         "layers_removed": list(entry.get("layers_removed") or []), "vocabulary": None}
        if isinstance(entry.get("recipe"), str):
            entry["recipe"] = to_jsonable(RECIPES.get(entry["recipe"]))
        return entry

    data = dict(data)
    for name in ("dense", "fitted"):
        data[name] = artifact(data[name])
    data["candidates"] = [artifact(c) for c in data.get("candidates") or []]
    return data
