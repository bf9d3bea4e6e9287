"""edgeprune: fit a transformer to an edge device by removing heads, quantizing and exporting it.

The public names below are imported when first used (PEP 562), so that `import edgeprune` — and the command
line's `--help`, `--version` and `devices list` — load neither torch nor transformers.
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name → the module that defines it
_SOURCES: dict[str, str] = {
    **dict.fromkeys(("BenchmarkResult", "benchmark_local", "benchmark_on"), "edgeprune.bench"),
    **dict.fromkeys(("DeviceProfile", "load_profile"), "edgeprune.devices"),
    **dict.fromkeys(("BudgetNotMetError", "EdgepruneError", "UserInputError", "VerificationError"),
                    "edgeprune.errors"),
    **dict.fromkeys(("export", "load_artifact", "verify_artifact"), "edgeprune.export"),
    **dict.fromkeys(("HeadScores", "LayerScores", "default_scoring", "score_heads", "score_layers"),
                    "edgeprune.importance"),
    **dict.fromkeys(("load", "save"), "edgeprune.models.io"),
    **dict.fromkeys(("Constraints", "HardConcreteConfig", "PruningPlan", "SelectionAmount", "StructureCompensation",
                     "StructurePlan", "apply_plan", "apply_structure", "iterative_prune", "learn_head_gates",
                     "measure_flops", "measure_head_means", "plan_global_topk", "plan_hard_concrete", "plan_heads",
                     "plan_per_layer", "plan_threshold", "predicted_flops", "predicted_parameter_count", "prune",
                     "prune_heads"), "edgeprune.pruning"),
    "quantize": "edgeprune.quantize",
    **dict.fromkeys(("DistillConfig", "DistillData", "DistillResult", "distill", "prune_and_recover"),
                    "edgeprune.recovery"),
    **dict.fromkeys(("Budget", "FitResult"), "edgeprune.search"),
    **dict.fromkeys(("FitOptions", "fit"), "edgeprune.search.fit"),
    **dict.fromkeys(("TASKS", "CausalLMTask", "EmbeddingTask", "ImageClassificationTask", "Quality", "Task",
                     "TextClassificationTask", "bundled_task", "make_task", "module_task"), "edgeprune.tasks"),
}
# functions named like the sub-package that holds them: importing the sub-package must not replace the function
_SHADOWED = frozenset(name for name, source in _SOURCES.items() if source == f"edgeprune.{name}")

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'edgeprune' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return  # the import system binds a loaded sub-package to its name here; `edgeprune.export` stays the
        super().__setattr__(name, value)  # function, as with the eager imports this replaces


sys.modules[__name__].__class__ = _Package

if TYPE_CHECKING:  # what type checkers and IDEs see: the eager imports
    from edgeprune.bench import BenchmarkResult, benchmark_local, benchmark_on  # noqa: F401
    from edgeprune.devices import DeviceProfile, load_profile  # noqa: F401
    from edgeprune.errors import BudgetNotMetError, EdgepruneError, UserInputError, VerificationError  # noqa: F401
    from edgeprune.export import export, load_artifact, verify_artifact  # noqa: F401
    from edgeprune.importance import (  # noqa: F401
        HeadScores,
        LayerScores,
        default_scoring,
        score_heads,
        score_layers,
    )
    from edgeprune.models.io import load, save  # noqa: F401
    from edgeprune.pruning import (  # noqa: F401
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
    from edgeprune.quantize import quantize  # noqa: F401
    from edgeprune.recovery import DistillConfig, DistillData, DistillResult, distill, prune_and_recover  # noqa: F401
    from edgeprune.search import Budget, FitResult  # noqa: F401
    from edgeprune.search.fit import FitOptions, fit  # noqa: F401
    from edgeprune.tasks import (  # noqa: F401
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
