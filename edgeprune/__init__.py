"""edgeprune: fit a transformer to an edge device by removing heads, quantizing and exporting it."""

__version__ = "0.1.0"

from edgeprune.bench import BenchmarkResult, benchmark_local  # noqa: E402
from edgeprune.devices import DeviceProfile, load_profile  # noqa: E402
from edgeprune.errors import BudgetNotMetError, EdgepruneError, UserInputError, VerificationError  # noqa: E402
from edgeprune.export import export_executorch, verify_artifact  # noqa: E402
from edgeprune.importance import HeadScores, score_heads  # noqa: E402
from edgeprune.models.io import load, save  # noqa: E402
from edgeprune.pruning import PruningPlan, apply_plan, plan_global_topk, prune_heads  # noqa: E402
from edgeprune.quantize import quantize  # noqa: E402
from edgeprune.search import Budget, FitResult  # noqa: E402
from edgeprune.search.fit import FitOptions, fit  # noqa: E402
from edgeprune.tasks import TextClassificationTask, bundled_task  # noqa: E402

__all__ = [
    "Budget", "BenchmarkResult", "BudgetNotMetError", "DeviceProfile", "EdgepruneError", "FitOptions", "FitResult",
    "HeadScores", "PruningPlan", "TextClassificationTask", "UserInputError", "VerificationError", "apply_plan",
    "benchmark_local", "bundled_task", "export_executorch", "fit", "load", "load_profile", "plan_global_topk",
    "prune_heads", "quantize", "save", "score_heads", "verify_artifact",
]
