"""`fit`: score heads once, then search recipe × heads removed until the artifact fits the budget.

Policy (walking skeleton): recipes are tried from highest fidelity to smallest; within a recipe,
the size model proposes the fewest heads removed that can fit, a real export settles it, and the
search narrows between the largest count known over budget and the smallest known to fit. The
first recipe with a fitting candidate wins: within a recipe, fewer removed heads keep more of the
model, and the ladder is ordered by fidelity.
"""

import copy
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import torch
from torch import nn

from edgeprune.bench.benchmark import benchmark_on
from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.devices.transports.base import open_transport
from edgeprune.errors import UserInputError
from edgeprune.export import RUNTIMES, content_key, export_prepared, load_artifact, verify_artifact
from edgeprune.importance import HeadScores, score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import PruningPlan, apply_plan, plan_global_topk
from edgeprune.quantize import FIT_LADDERS, FP32_RECIPE, RECIPES, Recipe, SizeModel, recipe_for_runtime
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.report.markdown import render_markdown
from edgeprune.search.budget import Budget
from edgeprune.search.result import BuiltArtifact, FitResult, Trial
from edgeprune.serialization import to_jsonable, write_json_atomic, write_text_atomic
from edgeprune.tasks import TextClassificationTask

ARTIFACT_STEM = "model"  # the fitted artifact: model.pte or model.tflite
BASELINE_STEM = "dense-fp32"
VOCABULARY_NAME = "vocabulary.json"  # written when the vocabulary was trimmed: original ids → artifact ids
SIZE_MODEL_SLACK = 1.05  # export anyway when the prediction is within 5 % of the budget


@dataclass
class FitOptions:
    criterion: str = "taylor-output-proj"  # best gradient criterion one-shot at 50–75 % (benchmarks/criteria.py)
    scoring_examples: int = 256  # calibration documents used to score heads
    scoring_batch_size: int = 16
    min_heads_per_layer: int = 1
    runtime: str | None = None  # None: the device profile's runtime
    recipes: tuple[str, ...] | None = None  # None: the runtime's ladder, highest fidelity first
    verify_examples: int = 8  # real validation inputs each export is checked on
    trim_vocabulary: bool = False  # keep only embedding rows of tokens in the calibration and validation data
    bench_warmup: int = 5
    bench_runs: int = 30

    def __post_init__(self) -> None:
        if self.runtime is not None:
            RUNTIMES.get(self.runtime)
        if self.recipes is not None and not self.recipes:
            raise UserInputError(f"name at least one recipe; choose from: {', '.join(RECIPES.names())}")
        for recipe in self.recipes or ():
            RECIPES.get(recipe)
        if self.scoring_examples < 1 or self.verify_examples < 1 or self.bench_runs < 20:
            raise UserInputError("need scoring_examples >= 1, verify_examples >= 1 and bench_runs >= 20")


def default_out_dir() -> Path:
    return Path("runs") / datetime.now().strftime("fit-%Y%m%d-%H%M%S")


def prepare_out_dir(out: Path) -> Path:
    """Refuse a non-empty target; work in a hidden sibling that is renamed into place at the end."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserInputError(f"output folder {out} already exists and is not empty; choose another --out")
    work = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


class _Builder:
    """Prunes, quantizes, exports and verifies candidates, reusing exports by content hash."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: TextClassificationTask,
                 options: FitOptions, work: Path, progress: Progress, runtime: str,
                 vocabulary: VocabularyMap | None = None) -> None:
        self.teacher = teacher
        self.vocabulary = vocabulary
        # candidates start from the trimmed teacher; the dense baseline keeps the full vocabulary
        self.source = trim_vocabulary(copy.deepcopy(teacher), vocabulary) if vocabulary else teacher
        self.scores = scores
        self.task = task
        self.options = options
        self.work = work
        self.progress = progress
        self.size_model = SizeModel()
        self.example = task.example_inputs("validation", 1)[0]
        self.verify_inputs = task.example_inputs("validation", options.verify_examples)
        self.suffix = RUNTIMES.get(runtime).suffix

    def plan(self, heads_removed: int) -> PruningPlan:
        return plan_global_topk(self.scores, heads_removed, self.options.min_heads_per_layer)

    def pruned(self, plan: PruningPlan, baseline: bool = False) -> nn.Module:
        return apply_plan(copy.deepcopy(self.teacher if baseline else self.source), plan)

    def predict(self, plan: PruningPlan, recipe: Recipe) -> int:
        return self.size_model.predict(self.pruned(plan), recipe)

    def remap(self, inputs: tuple[torch.Tensor, ...], baseline: bool) -> tuple[torch.Tensor, ...]:
        """Inputs as the artifact takes them: token ids through the vocabulary map when it was trimmed."""
        if baseline or self.vocabulary is None:
            return inputs
        return (self.vocabulary.apply(inputs[0]), *inputs[1:])

    def build(self, plan: PruningPlan, recipe: Recipe, file_name: str, label: str,
              baseline: bool = False) -> tuple[BuiltArtifact, Trial]:
        model = self.pruned(plan, baseline)
        predicted = self.size_model.predict(model, recipe)
        example = self.remap(self.example, baseline)
        key = content_key(model, recipe.name, example)
        self.progress.note(f"{label}: {recipe.name}, {plan.heads_removed} heads removed: quantize, export, verify")
        quantized = recipe.apply(model)
        exported = export_prepared(quantized, example, self.work / file_name, recipe,
                                   cache_dir=self.task.cache_dir / "exports", cache_key=key)
        if not baseline:  # the baseline's full vocabulary would miscalibrate the candidates' overhead
            self.size_model.observe(model, recipe, exported.size_bytes)
        program = load_artifact(exported.path)
        verification = verify_artifact(quantized, program, [self.remap(i, baseline) for i in self.verify_inputs],
                                       recipe.min_cosine, name=f"{label} ({recipe.name})")
        self.progress.note(
            f"  {exported.size_bytes / 1e6:.2f} MB (predicted {predicted / 1e6:.2f}), "
            f"{'cached' if exported.cached else f'exported in {exported.export_seconds:.0f} s'}, "
            f"cosine to PyTorch {verification.min_cosine:.5f}"
        )
        artifact = BuiltArtifact(
            label=label, recipe=recipe.name, path=file_name, plan=plan.to_dict(),
            parameters=sum(p.numel() for p in model.parameters()), file_bytes=exported.size_bytes,
            predicted_bytes=predicted, verification=verification,
            vocabulary_size=None if baseline or self.vocabulary is None else len(self.vocabulary.kept_ids),
        )
        trial = Trial(recipe.name, plan.heads_removed, predicted, exported.size_bytes,
                      export_seconds=round(exported.export_seconds, 2), cached_export=exported.cached)
        return artifact, trial


def fit(
    task: TextClassificationTask,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
) -> FitResult:
    """Fit `task`'s model to `device` within `budget`; write the artifact, result.json and report.md to `out`.

    Returns the FitResult; when nothing fits, its status is "budget_not_met" and `fitted` is the
    closest (smallest) artifact built.
    """
    started = time.perf_counter()
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    budget = budget or Budget(max_mb=profile.max_mb)
    options = options or FitOptions()
    runtime = options.runtime or profile.runtime
    RUNTIMES.get(runtime)
    recipes = tuple(recipe_for_runtime(name, runtime).name for name in (options.recipes or FIT_LADDERS[runtime]))
    progress = progress or task.progress
    out = Path(out) if out is not None else default_out_dir()
    work = prepare_out_dir(out)
    timings: dict[str, float] = {}
    try:
        mark = time.perf_counter()
        teacher = task.teacher()
        timings["teacher"] = time.perf_counter() - mark
        progress.note(f"dense teacher: test accuracy {teacher.test_accuracy:.4f} (PyTorch), "
                      f"split sizes {task.splits.sizes()}")

        mark = time.perf_counter()
        batches = task.batches("calibration", options.scoring_batch_size, limit=options.scoring_examples)
        with progress.task(f"scoring heads ({options.criterion})", options.scoring_examples) as bar:
            raw_scores = score_heads(teacher.model, bar.track(batches), options.criterion)
        scores = raw_scores.normalize_per_layer()
        timings["scoring"] = time.perf_counter() - mark

        vocabulary = task.vocabulary() if options.trim_vocabulary else None
        if vocabulary is not None:
            progress.note(f"vocabulary trimmed to the {len(vocabulary.kept_ids)} of {vocabulary.original_size} "
                          "tokens seen in the calibration and validation data (others become the unknown token)")
        builder = _Builder(teacher.model, scores, task, options, work, progress, runtime, vocabulary)
        blocks = adapter_for(teacher.model).attention_blocks(teacher.model)
        dense_plan = PruningPlan.dense([b.num_heads for b in blocks])
        mark = time.perf_counter()
        dense, _ = builder.build(dense_plan, RECIPES.get(FP32_RECIPE[runtime]), BASELINE_STEM + builder.suffix,
                                 "dense baseline", baseline=True)
        fitted, trials = _search(builder, blocks, budget, recipes, options.min_heads_per_layer, progress)
        timings["search_and_export"] = time.perf_counter() - mark

        mark = time.perf_counter()
        if vocabulary is not None:
            vocabulary.save(work / VOCABULARY_NAME)
        for artifact in (dense, fitted):
            run = load_artifact(work / artifact.path)
            trimmed = artifact is fitted and vocabulary is not None
            artifact.test_accuracy = task.runtime_accuracy(
                (lambda ids, mask, run=run: run(vocabulary.apply(ids), mask)) if trimmed else run, "test")
        timings["evaluation"] = time.perf_counter() - mark

        mark = time.perf_counter()
        with open_transport(profile.endpoint, profile.python) as device_link:
            for artifact in (dense, fitted):  # side by side, same settings, on the profile's device
                progress.note(f"benchmarking {artifact.label} on {profile.name} ({options.bench_runs} runs, "
                              f"{profile.threads} threads)")
                example = builder.remap(builder.example, baseline=artifact is dense)
                artifact.benchmark = benchmark_on(device_link, work / artifact.path, example, runtime,
                                                  profile.threads, options.bench_warmup, options.bench_runs,
                                                  device=profile.name)
        timings["benchmark"] = time.perf_counter() - mark

        fits = budget.size_fits(fitted.file_bytes)
        message = _summary(fits, fitted, budget)
        result = FitResult(
            status="fit" if fits else "budget_not_met", message=message, device=profile.name, budget=budget,
            task=task.describe(), teacher_test_accuracy=teacher.test_accuracy, head_scores=raw_scores.to_dict(),
            dense=dense, fitted=fitted, trials=trials,
            reproduce=_reproduce(task, profile, budget, options, fitted, runtime), out_dir=str(out),
            elapsed_s=round(time.perf_counter() - started, 1), timings_s={k: round(v, 1) for k, v in timings.items()},
        )
        write_json_atomic(work / "result.json", to_jsonable(result))
        write_text_atomic(work / "report.md", render_markdown(result))
        if out.exists():
            out.rmdir()  # empty: prepare_out_dir refused anything else
        os.replace(work, out)
        progress.note(message)
        return result
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _search(builder: _Builder, blocks: list, budget: Budget, recipes: tuple[str, ...], min_heads_per_layer: int,
            progress: Progress) -> tuple[BuiltArtifact, list[Trial]]:
    """Per recipe, find the fewest heads removed whose real file fits, guided by the size model.

    Size falls as heads go, so each export splits the counts: at or below a count that was over
    budget nothing fits; above a count that fits, nothing can be better. The size model picks the
    next count to try and is recalibrated by every real file.
    """
    removable = sum(max(0, b.num_heads - min_heads_per_layer) for b in blocks)
    step = max(1, len(blocks))  # one head per layer on average per step
    counts = sorted(set(range(0, removable + 1, step)) | {removable})
    trials: list[Trial] = []
    built: dict[tuple[str, int], BuiltArtifact] = {}
    closest: tuple[int, Recipe, int] | None = None  # (size in bytes, recipe, heads removed)
    for recipe in (RECIPES.get(name) for name in recipes):
        known_over, known_fit = -1, None
        while True:
            open_counts = [c for c in counts if known_over < c and (known_fit is None or c < known_fit)]
            predictions = {c: builder.predict(builder.plan(c), recipe) for c in open_counts}
            hopeful = [c for c in open_counts if budget.size_fits(predictions[c])]
            if not hopeful and known_fit is None and open_counts and open_counts[-1] == counts[-1] \
                    and budget.size_fits(int(predictions[counts[-1]] / SIZE_MODEL_SLACK)):
                hopeful = [counts[-1]]  # near the line: a real file settles what the model cannot
            if not hopeful:
                break
            count = hopeful[0]
            artifact, trial = builder.build(builder.plan(count), recipe,
                                            f"candidate-{recipe.name}-{count}{builder.suffix}", "candidate")
            trial.fits = budget.size_fits(artifact.file_bytes)
            trials.append(trial)
            built[(recipe.name, count)] = artifact
            if closest is None or artifact.file_bytes < closest[0]:
                closest = (artifact.file_bytes, recipe, count)
            if trial.fits:
                known_fit = count
            else:
                known_over = count
                progress.note(f"  {artifact.file_bytes / 1e6:.2f} MB is over {budget.max_mb} MB: removing more heads")
        for count in counts:
            if (recipe.name, count) not in built and (known_fit is None or count < known_fit):
                predicted = builder.predict(builder.plan(count), recipe)
                reason = ("a candidate with more heads removed was already over budget" if count < known_over
                          else "the size model predicts it is over budget")
                trials.append(Trial(recipe.name, count, predicted, note=f"skipped: {reason}"))
        if known_fit is not None:
            return _choose(built[(recipe.name, known_fit)], builder.work), trials
        predicted_min = builder.predict(builder.plan(counts[-1]), recipe)
        progress.note(f"{recipe.name}: nothing fits {budget.max_mb} MB (most pruned: predicted "
                      f"{predicted_min / 1e6:.2f} MB); next recipe")
        if closest is None or predicted_min < closest[0]:
            closest = (predicted_min, recipe, counts[-1])
    assert closest is not None, "recipes is never empty"
    _, recipe, count = closest
    if (recipe.name, count) not in built:
        progress.note(f"nothing fits {budget.max_mb} MB; building the closest candidate ({recipe.name}, "
                      f"{count} heads removed)")
        artifact, trial = builder.build(builder.plan(count), recipe, f"candidate-{recipe.name}-{count}{builder.suffix}",
                                        "closest")
        trial.fits = budget.size_fits(artifact.file_bytes)
        trial.note = "closest: the smallest candidate"
        trials.append(trial)
        built[(recipe.name, count)] = artifact
    chosen = _choose(built[(recipe.name, count)], builder.work)
    chosen.label = "fitted" if budget.size_fits(chosen.file_bytes) else "closest"
    return chosen, trials


def _choose(artifact: BuiltArtifact, work: Path) -> BuiltArtifact:
    """Keep the chosen candidate as model.pte / model.tflite; drop the other candidates' files."""
    name = ARTIFACT_STEM + Path(artifact.path).suffix
    os.replace(work / artifact.path, work / name)
    for leftover in work.glob("candidate-*"):
        leftover.unlink()
    artifact.path = name
    artifact.label = "fitted"
    return artifact


def _summary(fits: bool, fitted: BuiltArtifact, budget: Budget) -> str:
    size = f"{fitted.file_bytes / 1e6:.2f} MB"
    heads = f"{fitted.plan['heads_removed']} of {sum(fitted.plan['num_heads'])} heads removed"
    if fits:
        return f"fits: {size} <= {budget.max_mb} MB with {fitted.recipe}, {heads}"
    return (f"cannot fit {budget.max_mb} MB: the closest artifact is {size} ({fitted.recipe}, {heads}); "
            "head pruning and int8 weights are not enough; raise --max-mb")


def _reproduce(task: TextClassificationTask, profile: DeviceProfile, budget: Budget, options: FitOptions,
               fitted: BuiltArtifact, runtime: str) -> dict[str, object]:
    import torch
    import transformers

    from edgeprune import __version__

    return {
        "command": shlex.join(["edgeprune", *sys.argv[1:]]) if Path(sys.argv[0]).name == "edgeprune" else None,
        "task": task.name, "model_path": str(task.model_path), "max_length": task.max_length, "seed": task.seed,
        "device": profile.name, "budget": to_jsonable(budget), "options": to_jsonable(options),
        "criterion": options.criterion, "strategy": fitted.plan["strategy"], "scores_normalized_per_layer": True,
        "heads_removed": fitted.plan["heads_removed"], "kept_heads": fitted.plan["kept_heads"],
        "quantization": fitted.recipe, "runtime": runtime,
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
