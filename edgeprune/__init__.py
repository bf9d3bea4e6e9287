"""edgeprune: fit a transformer to an edge device by removing heads, quantizing and exporting it."""

__version__ = "0.1.0"

from edgeprune.bench import BenchmarkResult, benchmark_local, benchmark_on  # noqa: E402
from edgeprune.devices import DeviceProfile, load_profile  # noqa: E402
from edgeprune.errors import BudgetNotMetError, EdgepruneError, UserInputError, VerificationError  # noqa: E402
from edgeprune.export import export, load_artifact, verify_artifact  # noqa: E402
from edgeprune.importance import HeadScores, LayerScores, default_scoring, score_heads, score_layers  # noqa: E402
from edgeprune.models.io import load, save  # noqa: E402
from edgeprune.pruning import (  # noqa: E402
    Constraints,
    HardConcreteConfig,
    PruningPlan,
    SelectionAmount,
    StructureCompensation,
    StructurePlan,
    apply_plan,
    apply_structure,
    iterative_prune,
    learn_head_gates,
    measure_flops,
    measure_head_means,
    plan_global_topk,
    plan_hard_concrete,
    plan_heads,
    plan_per_layer,
    plan_threshold,
    predicted_flops,
    predicted_parameter_count,
    prune,
    prune_heads,
)
from edgeprune.quantize import quantize  # noqa: E402
from edgeprune.recovery import DistillConfig, DistillData, DistillResult, distill, prune_and_recover  # noqa: E402
from edgeprune.search import Budget, FitResult  # noqa: E402
from edgeprune.search.fit import FitOptions, fit  # noqa: E402
from edgeprune.tasks import (  # noqa: E402
    TASKS,
    CausalLMTask,
    EmbeddingTask,
    ImageClassificationTask,
    Quality,
    Task,
    TextClassificationTask,
    bundled_task,
    make_task,
    module_task,
)

__all__ = [
    "Budget", "BenchmarkResult", "BudgetNotMetError", "Constraints", "DeviceProfile", "EdgepruneError", "FitOptions",
    "FitResult", "HardConcreteConfig", "HeadScores", "LayerScores", "PruningPlan", "TextClassificationTask",
    "UserInputError", "VerificationError", "apply_plan", "benchmark_local", "bundled_task", "export", "fit",
    "iterative_prune", "learn_head_gates", "load", "load_artifact", "load_profile", "measure_flops", "plan_global_topk",
    "plan_hard_concrete", "plan_per_layer", "plan_threshold", "predicted_flops", "predicted_parameter_count",
    "prune_heads", "quantize", "save", "score_heads", "score_layers", "verify_artifact", "DistillConfig", "DistillData",
    "DistillResult", "distill", "prune_and_recover", "benchmark_on", "TASKS", "CausalLMTask", "EmbeddingTask",
    "ImageClassificationTask", "Quality", "Task", "make_task", "module_task", "StructurePlan", "StructureCompensation",
    "apply_structure", "SelectionAmount", "measure_head_means", "plan_heads", "prune", "default_scoring",
]
