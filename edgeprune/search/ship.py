"""What a finished fit writes for the app and the team: the artifact, what the app needs beside it, the summary
line and the recipe that reproduces the fit."""

import os
import shlex
import sys
from pathlib import Path

import torch

from edgeprune.devices import DeviceProfile
from edgeprune.export.manifest import MANIFEST_NAME, ModelManifest, TokenizerFacts, inspect_artifact
from edgeprune.export.usage import USAGE_NAME, usage_markdown
from edgeprune.importance import HeadScores
from edgeprune.quantize.trimmed_tokenizer import TokenizerRewrite, rewrite_tokenizer_files
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.search.budget import Budget
from edgeprune.search.choice import format_against
from edgeprune.search.options import FitOptions
from edgeprune.search.result import BuiltArtifact
from edgeprune.search.scoring import normalization, scoring_decision
from edgeprune.serialization import to_jsonable, write_text_atomic
from edgeprune.tasks.base import Task
from edgeprune.tasks.text import TOKENIZER_FILES

ARTIFACT_STEM = "model"  # the fitted artifact: model.pte or model.tflite
VOCABULARY_NAME = "vocabulary.json"  # written when the vocabulary was trimmed: original ids → artifact ids
LABELS_NAME = "labels.json"  # written by classification tasks
BASELINE_DIR = "baseline"  # the dense baseline and its model.json: for the team, outside what the app ships


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


def ship_files(task: Task, work: Path, fitted: BuiltArtifact, vocabulary: VocabularyMap | None,
               baseline: BuiltArtifact | None = None) -> list[str]:
    """What the app needs beside the artifact: tokenizer files (with the artifact's ids when the vocabulary was
    trimmed) or preprocessing, labels, model.json read from the artifact, USAGE.md; returns their names.

    The dense `baseline` moves into baseline/ (with its own model.json): it is for the team, not the app; its
    `path` says where."""
    shipped = task.ship(work)
    rewrite = None
    if vocabulary is not None:
        vocabulary.save(work / VOCABULARY_NAME)  # the record of the trim; the app needs it only without a rewrite
        rewrite = rewrite_tokenizer_files(work, vocabulary)
        shipped = [name for name in shipped if name not in rewrite.dropped]
        if not rewrite.gives_artifact_ids:
            shipped.append(VOCABULARY_NAME)
    labels = LABELS_NAME if LABELS_NAME in shipped else None
    manifest = app_manifest(task, work / fitted.path, fitted.recipe.name, vocabulary, rewrite, sorted(shipped))
    manifest.files = sorted([*shipped, USAGE_NAME])
    manifest.save(work / MANIFEST_NAME)
    write_text_atomic(work / USAGE_NAME, usage_markdown(manifest, labels))
    if baseline is not None:
        move_baseline(task, work, baseline)
    return sorted([*shipped, USAGE_NAME, MANIFEST_NAME])


def move_baseline(task: Task, work: Path, baseline: BuiltArtifact) -> None:
    """The dense baseline into baseline/, described by baseline/model.json (bench reads it); `baseline.path` follows."""
    folder = work / BASELINE_DIR
    folder.mkdir(exist_ok=True)
    name = Path(baseline.path).name
    os.replace(work / baseline.path, folder / name)
    baseline.path = f"{BASELINE_DIR}/{name}"
    manifest = app_manifest(task, folder / name, baseline.recipe.name, None, None, [])
    manifest.notes.append("the dense fp32 baseline the fitted artifact was compared with; not for the app")
    manifest.save(folder / MANIFEST_NAME)


def app_manifest(task: Task, artifact: Path, recipe: str, vocabulary: VocabularyMap | None,
                 rewrite: TokenizerRewrite | None, shipped: list[str]) -> ModelManifest:
    """The artifact's own manifest (read by its runtime), with the task's names, meanings and value ranges."""
    manifest = inspect_artifact(artifact)
    manifest.recipe, manifest.task, manifest.metric = recipe, task.kind, task.metric
    if len(manifest.inputs) == len(task.artifact_input_names):
        data = task.encode("validation")
        for spec, name in zip(manifest.inputs, task.artifact_input_names, strict=True):
            spec.name = name
            if name not in data:  # e.g. a generator's cache positions: no data of their own
                continue
            values = data[name]
            if vocabulary is not None and name == task.input_names[0]:
                values = vocabulary.apply(values)  # token ids as the trimmed artifact takes them
            spec.value_range = [values.min().item(), values.max().item()]
    outputs = _outputs(task)
    if len(manifest.outputs) == len(outputs):
        for spec, described in zip(manifest.outputs, outputs, strict=True):
            spec.name, spec.meaning = described["name"], described["meaning"]
    tokenizer_files = [name for name in shipped if name in TOKENIZER_FILES]
    if tokenizer_files:
        manifest.tokenizer = TokenizerFacts(
            files=tokenizer_files, gives_artifact_ids=rewrite is None or rewrite.gives_artifact_ids,
            trimmed_vocabulary_size=len(vocabulary.kept_ids) if vocabulary is not None else None,
            original_vocabulary_size=vocabulary.original_size if vocabulary is not None else None,
            id_map=VOCABULARY_NAME if rewrite is not None and not rewrite.gives_artifact_ids else None,
            note=rewrite.note if rewrite is not None else "the model's own tokenizer files")
    return manifest


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


def summary(fits: bool, fitted: BuiltArtifact, budget: Budget, binding: list[str], suggestions: list[str],
            estimated: bool = False, stopped_early: str | None = None) -> str:
    """The fit's one-line outcome; `estimated`: the device was not reachable and its figures were estimated here;
    `stopped_early`: why the search ended before nothing left could win (said after the outcome)."""
    outcome = _outcome(fits, fitted, budget, binding, suggestions, estimated)
    return f"{outcome} (search stopped early: {stopped_early})" if stopped_early else outcome


def _outcome(fits: bool, fitted: BuiltArtifact, budget: Budget, binding: list[str], suggestions: list[str],
             estimated: bool) -> str:
    size = f"{fitted.file_bytes / 1e6:.2f} MB"
    heads = f"{fitted.describe()} (of {total_heads(fitted)} heads)"
    shown = [(c, *format_against(c.value, c.limit)) for c in fitted.checks]
    measured = "; ".join(f"{c.name} {value}{(' ' + c.unit) if c.unit else ''} (limit {limit})"
                         for c, value, limit in shown)
    if fits and estimated:
        return (f"fits every budget as ESTIMATED here, the device not being reachable (nothing was measured on it), "
                f"with {fitted.recipe.name}, {heads}: {measured or size}")
    if fits:
        return f"fits every budget with {fitted.recipe.name}, {heads}: {measured or size}"
    return (f"cannot meet {', '.join(binding)}: the closest candidate is {size} ({fitted.recipe.name}, {heads}; "
            f"{measured}); {'; '.join(suggestions)}")


def reproduce(task: Task, profile: DeviceProfile, budget: Budget, options: FitOptions,
              fitted: BuiltArtifact, runtime: str, scores: HeadScores) -> dict[str, object]:
    """What rebuilds the fitted artifact: the options as given and, with `criterion="auto"`, the scoring chosen
    (`scores`, the raw head scores the search used, record it)."""

    import transformers

    from edgeprune import __version__

    heads = fitted.plan.heads
    return {
        "command": shlex.join(["edgeprune", *sys.argv[1:]]) if Path(sys.argv[0]).name == "edgeprune" else None,
        "task": task.describe(), "model_path": str(task.model_path), "seed": task.seed,
        "device": profile.name, "budget": to_jsonable(budget), "options": to_jsonable(options),
        "criterion": scores.criterion, "strategy": heads.strategy if heads else None,
        "normalize": normalization(scores, options),
        "scoring_decision": to_jsonable(decision) if (decision := scoring_decision(scores)) else None,
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

