"""What a finished fit writes for the app and the team: the artifact, what the app needs beside it, the summary
line and the recipe that reproduces the fit."""

import os
import shlex
import sys
from pathlib import Path

import torch

from edgeprune.devices import DeviceProfile
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.search.budget import Budget
from edgeprune.search.choice import format_value
from edgeprune.search.options import FitOptions
from edgeprune.search.result import BuiltArtifact
from edgeprune.serialization import to_jsonable, write_json_atomic
from edgeprune.tasks.base import Task

ARTIFACT_STEM = "model"  # the fitted artifact: model.pte or model.tflite
VOCABULARY_NAME = "vocabulary.json"  # written when the vocabulary was trimmed: original ids → artifact ids
SIGNATURE_NAME = "model.json"  # inputs, outputs and files the app needs


def keep_only(fitted: BuiltArtifact, candidates: list[BuiltArtifact], work: Path) -> None:
    """Keep the chosen candidate as model.pte / model.tflite; drop the other candidates' files."""
    name = ARTIFACT_STEM + Path(fitted.path).suffix
    os.replace(work / fitted.path, work / name)
    for leftover in work.glob("candidate-*"):
        leftover.unlink()
    for candidate in candidates:
        if candidate is not fitted:
            candidate.path = f"(not kept) {candidate.path}"
    fitted.path = name


def ship_files(task: Task, work: Path, fitted: BuiltArtifact, vocabulary: VocabularyMap | None) -> list[str]:
    """What the app needs: tokenizer or preprocessing, labels, the vocabulary map, the input signature."""
    shipped = task.ship(work)
    if vocabulary is not None:
        vocabulary.save(work / VOCABULARY_NAME)
        shipped.append(VOCABULARY_NAME)
    signature = {
        "artifact": fitted.path, "runtime_recipe": fitted.recipe.name,
        "inputs": to_jsonable(task.input_signature()),
        "outputs": _outputs(task), "metric": task.metric,
        "vocabulary_map": VOCABULARY_NAME if vocabulary is not None else None,
        "files": sorted(shipped),
    }
    write_json_atomic(work / SIGNATURE_NAME, signature)
    return [*sorted(shipped), SIGNATURE_NAME]


def _outputs(task: Task) -> list[dict[str, str]]:
    if task.kind == "causal-lm":
        return [{"name": "logits", "meaning": "next-token logits for every position"}]
    if task.kind == "embedding":
        return [{"name": "embedding", "meaning": "the sentence embedding"}]
    if task.kind == "module":
        return [{"name": "output", "meaning": "the module's outputs, first one scored by the task's metric"}]
    outputs = [{"name": "logits", "meaning": "one per label, in labels.json order"}]
    if task.kind == "classification" and not getattr(task, "uses_own_head", False):
        outputs.append({"name": "embedding", "meaning": "the mean-pooled sentence embedding"})
    return outputs



def total_heads(artifact: BuiltArtifact) -> int:
    """The teacher's heads (what `heads_removed` counts against)."""
    return 0 if artifact.plan.heads is None else sum(artifact.plan.heads.num_heads)


def summary(fits: bool, fitted: BuiltArtifact, budget: Budget, binding: list[str], suggestions: list[str]) -> str:
    size = f"{fitted.file_bytes / 1e6:.2f} MB"
    heads = f"{fitted.describe()} (of {total_heads(fitted)} heads)"
    measured = "; ".join(f"{c.name} {format_value(c.value)}{(' ' + c.unit) if c.unit else ''} "
                         f"(limit {format_value(c.limit)})"
                         for c in fitted.checks)
    if fits:
        return f"fits every budget with {fitted.recipe.name}, {heads}: {measured or size}"
    return (f"cannot meet {', '.join(binding)}: the closest candidate is {size} ({fitted.recipe.name}, {heads}; "
            f"{measured}); {'; '.join(suggestions)}")


def reproduce(task: Task, profile: DeviceProfile, budget: Budget, options: FitOptions,
               fitted: BuiltArtifact, runtime: str) -> dict[str, object]:
    import transformers

    from edgeprune import __version__

    heads = fitted.plan.heads
    return {
        "command": shlex.join(["edgeprune", *sys.argv[1:]]) if Path(sys.argv[0]).name == "edgeprune" else None,
        "task": task.describe(), "model_path": str(task.model_path), "seed": task.seed,
        "device": profile.name, "budget": to_jsonable(budget), "options": to_jsonable(options),
        "criterion": options.criterion, "strategy": heads.strategy if heads else None, "normalize": options.normalize,
        "compensation": "mean head outputs folded into the output-projection bias" if options.compensate else None,
        "heads_removed": fitted.heads_removed, "kept_heads": heads.kept_heads if heads else None,
        # the whole StructurePlan (FFN neurons, vocabulary rows) is the fitted artifact's `plan` in result.json
        "quantization": fitted.recipe.name, "runtime": runtime,
        "versions": {"edgeprune": __version__, "torch": torch.__version__, "executorch": _version("executorch"),
                     "litert-torch": _version("litert-torch"), "ai-edge-litert": _version("ai-edge-litert"),
                     "transformers": transformers.__version__},
    }


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"

