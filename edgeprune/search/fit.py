"""`fit`: score heads once, then search recipe × heads removed for the best quality that meets every budget.

Policy. Size, latency, memory and energy fall as heads go, and quality falls with them; so within a
recipe the best candidate is the one with the fewest heads removed that meets the resource budgets.
The exact size model rejects counts that cannot fit before any export; a latency model fitted to the
device's measurements as they arrive skips counts predicted to be too slow; a real export and a real
benchmark settle each count that is tried, and the search narrows between the largest count known to
fail and the smallest known to pass. Every recipe of the ladder that can still win is searched (a
lower-fidelity recipe cannot win once a higher one meets the budgets with no head removed), and the
candidate with the best validation quality that meets every budget wins. The test split only measures
the winner and the dense baseline; it never takes part in a decision.

Each finished candidate is journaled in the hidden work folder, so `resume=True` continues an
interrupted fit without redoing anything finished; the output folder appears only when complete.
"""

import copy
import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgeprune.bench.benchmark import benchmark_on
from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.devices.transports.base import Transport, open_transport
from edgeprune.errors import UserInputError
from edgeprune.export import RUNTIMES, content_key, export_prepared, load_artifact, verify_artifact
from edgeprune.importance import HeadScores, score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import PruningPlan, apply_plan, measure_flops, plan_global_topk
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.quantize import FIT_LADDERS, FP32_RECIPE, RECIPES, Recipe, SizeModel, recipe_for_runtime
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.report import render_html, render_markdown
from edgeprune.search.budget import Budget
from edgeprune.search.latency import LatencyModel
from edgeprune.search.result import BuiltArtifact, FitResult, Trial
from edgeprune.serialization import from_jsonable, to_jsonable, write_json_atomic, write_text_atomic
from edgeprune.tasks.base import Quality, Task
from edgeprune.tasks.metrics import per_class_regressions

ARTIFACT_STEM = "model"  # the fitted artifact: model.pte or model.tflite
BASELINE_STEM = "dense-fp32"
VOCABULARY_NAME = "vocabulary.json"  # written when the vocabulary was trimmed: original ids → artifact ids
SIGNATURE_NAME = "model.json"  # inputs, outputs and files the app needs
JOURNAL_NAME = "journal.json"
SIZE_MODEL_SLACK = 1.05  # export anyway when the prediction is within 5 % of the budget
LATENCY_MODEL_SLACK = 1.15  # benchmark anyway when the latency model predicts within 15 % of the budget
ACCURACY_METRICS = ("accuracy", "top1")


@dataclass
class FitOptions:
    criterion: str = "fluctuation"  # best one-shot embedding cosine and accuracy at 25–75 % (benchmarks/criteria.py)
    normalize: str = "none"  # per-layer score normalization: "none" (raw fluctuation ranks best), "l2", "zscore"
    compensate: bool = True  # fold removed heads' mean outputs into the output-projection bias (FLAP)
    scoring_examples: int = 256  # calibration examples used to score heads
    scoring_batch_size: int = 16
    min_heads_per_layer: int = 1
    runtime: str | None = None  # None: the device profile's runtime
    recipes: tuple[str, ...] | None = None  # None: the runtime's ladder, highest fidelity first
    verify_examples: int = 8  # real validation inputs each export is checked on
    trim_vocabulary: bool = False  # keep only embedding rows of tokens in the calibration and validation data
    bench_warmup: int = 5
    bench_runs: int = 30
    recover_steps: int = 0  # > 0: distil each pruned candidate from the dense teacher for this many steps
    recovery_batch_size: int = 16

    def __post_init__(self) -> None:
        if self.runtime is not None:
            RUNTIMES.get(self.runtime)
        if self.recipes is not None and not self.recipes:
            raise UserInputError(f"name at least one recipe; choose from: {', '.join(RECIPES.names())}")
        for recipe in self.recipes or ():
            RECIPES.get(recipe)
        if self.scoring_examples < 1 or self.verify_examples < 1 or self.bench_runs < 20:
            raise UserInputError("need scoring_examples >= 1, verify_examples >= 1 and bench_runs >= 20")
        if self.normalize not in ("none", "l2", "zscore"):
            raise UserInputError(f"normalize must be none, l2 or zscore, got {self.normalize!r}")
        if self.recover_steps < 0 or self.recovery_batch_size < 1:
            raise UserInputError("recover_steps must be >= 0 (0: no recovery) and recovery_batch_size >= 1")
        if self.recover_steps and self.trim_vocabulary:
            raise UserInputError("recovery with a trimmed vocabulary is not supported yet; drop --trim-vocab or "
                                 "--recover-steps")


def default_out_dir() -> Path:
    return Path("runs") / datetime.now().strftime("fit-%Y%m%d-%H%M%S")


def work_dir_for(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def prepare_out_dir(out: Path, resume: bool = False) -> Path:
    """Refuse a non-empty target; work in a hidden sibling that is renamed into place at the end."""
    work = work_dir_for(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if resume and (out / "result.json").exists():
            raise UserInputError(f"{out} holds a finished fit (result.json); nothing to resume")
        raise UserInputError(f"output folder {out} already exists and is not empty; choose another --out")
    if resume:
        if not (work / JOURNAL_NAME).is_file():
            raise UserInputError(f"nothing to resume for {out}: no interrupted fit in {work}")
        return work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


class _Journal:
    """Finished work of this fit, saved after each step so an interrupted fit resumes where it stopped."""

    def __init__(self, path: Path, fingerprint: str, resume: bool) -> None:
        self.path = path
        self.data: dict[str, Any] = {"fingerprint": fingerprint, "scores": None, "candidates": {}}
        if resume:
            saved = json.loads(path.read_text())
            if saved.get("fingerprint") != fingerprint:
                raise UserInputError(f"{path.parent} was started with another model, data or options; resume it "
                                     "with the same command, or start a new fit")
            self.data = saved

    def save(self) -> None:
        write_json_atomic(self.path, self.data)

    def artifact(self, key: str) -> BuiltArtifact | None:
        saved = self.data["candidates"].get(key)
        return None if saved is None else from_jsonable(BuiltArtifact, saved)

    def record(self, key: str, artifact: BuiltArtifact) -> None:
        self.data["candidates"][key] = to_jsonable(artifact)
        self.save()


class _Builder:
    """Prunes, quantizes, exports, verifies, benchmarks and evaluates candidates; each one once."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: Task, options: FitOptions, work: Path,
                 progress: Progress, runtime: str, profile: DeviceProfile, device_link: Transport,
                 journal: _Journal, vocabulary: VocabularyMap | None = None) -> None:
        self.teacher = teacher
        self.vocabulary = vocabulary
        # candidates start from the trimmed teacher; the dense baseline keeps the full vocabulary
        self.source = trim_vocabulary(copy.deepcopy(teacher), vocabulary) if vocabulary else teacher
        self.scores = scores
        self.task = task
        self.options = options
        self.work = work
        self.progress = progress
        self.runtime = runtime
        self.profile = profile
        self.device_link = device_link
        self.journal = journal
        self.size_model = SizeModel()
        self.latency_model = LatencyModel(profile.peak_gflops, profile.mem_bandwidth_gbs)
        self.example = task.example_inputs("validation", 1)[0]
        self.verify_inputs = task.example_inputs("validation", options.verify_examples)
        self.suffix = RUNTIMES.get(runtime).suffix
        self._flops: dict[int, int] = {}
        self._recovered: dict[int, nn.Module] = {}  # heads removed → recovered model, reused by later candidates
        self.means = self._head_means() if options.compensate else None

    def _input_batches(self) -> list[dict[str, torch.Tensor]]:
        """Calibration batches holding only the model's inputs (what head means are measured on)."""
        return [{name: batch[name] for name in self.task.input_names}
                for batch in self.task.batches("calibration", self.options.scoring_batch_size,
                                               limit=self.options.scoring_examples)]

    def _head_means(self) -> HeadOutputMeans:
        """Each head's mean output on calibration data, measured once on the dense teacher."""
        from edgeprune.pruning.compensation import measure_head_means

        return measure_head_means(self.teacher, self._input_batches())

    def plan(self, heads_removed: int) -> PruningPlan:
        return plan_global_topk(self.scores, heads_removed, self.options.min_heads_per_layer)

    def pruned(self, plan: PruningPlan, baseline: bool = False) -> nn.Module:
        if baseline:
            return apply_plan(copy.deepcopy(self.teacher), plan)
        return apply_plan(copy.deepcopy(self.source), plan, compensation=self.means)

    def recovered(self, plan: PruningPlan) -> nn.Module:
        """The pruned model distilled from the dense teacher; starts from the closest recovered candidate with
        fewer heads removed whose kept heads include this plan's (global top-k plans nest), not from scratch."""
        from edgeprune.pruning import prune_heads
        from edgeprune.recovery import DistillConfig, DistillData, distill

        kept = [set(layer) for layer in plan.kept_heads]
        parents = [count for count, model in self._recovered.items() if count < plan.heads_removed and all(
            mine <= theirs for mine, theirs in zip(kept, map(set, self.plan(count).kept_heads), strict=True))]
        if parents:
            parent = max(parents)
            student = copy.deepcopy(self._recovered[parent])
            parent_kept = self.plan(parent).kept_heads
            removal = {layer: sorted(set(before) - kept[layer])
                       for layer, before in enumerate(parent_kept) if set(before) - kept[layer]}
            # the recovered parent's own head means: its heads no longer output what the teacher's did
            prune_heads(student, removal, compensate=self._input_batches() if self.means is not None else None)
            self.progress.note(f"  recovering from the recovered {parent}-heads-removed candidate")
        else:
            student = self.pruned(plan)
        config = DistillConfig(max_steps=self.options.recover_steps,
                               eval_every=max(1, self.options.recover_steps // 3), warmup_steps=min(
                                   20, self.options.recover_steps // 5), seed=self.task.seed)
        data = DistillData.from_task(self.task, self.options.recovery_batch_size, self.task.seed)
        result = distill(student, self.source, data, config, self.progress)
        self.progress.note(f"  recovered in {result.seconds:.0f} s: validation {result.metric} "
                           f"{result.initial_metric:.4f} → {result.best_metric:.4f}")
        self._recovered[plan.heads_removed] = student
        return student.eval()

    def predict_bytes(self, heads_removed: int, recipe: Recipe) -> int:
        return self.size_model.predict(self.pruned(self.plan(heads_removed)), recipe)

    def flops(self, heads_removed: int) -> int:
        if heads_removed not in self._flops:
            inputs = dict(zip(self.task.input_names, self.remap(self.example, False), strict=True))
            self._flops[heads_removed] = measure_flops(self.pruned(self.plan(heads_removed)), inputs)
        return self._flops[heads_removed]

    def remap(self, inputs: tuple[torch.Tensor, ...], baseline: bool) -> tuple[torch.Tensor, ...]:
        """Inputs as the artifact takes them: token ids through the vocabulary map when it was trimmed."""
        if baseline or self.vocabulary is None:
            return inputs
        return (self.vocabulary.apply(inputs[0]), *inputs[1:])

    def candidate(self, recipe: Recipe, heads_removed: int) -> BuiltArtifact:
        """Build, benchmark and evaluate (validation split) one candidate, or take it from the journal."""
        key = f"{recipe.name}:{heads_removed}"
        saved = self.journal.artifact(key)
        if saved is not None and (self.work / saved.path).is_file():
            self.progress.note(f"candidate {recipe.name}, {heads_removed} heads removed: finished before (resumed)")
            self.size_model.observe(self.pruned(self.plan(heads_removed)), recipe, saved.file_bytes)
        else:
            saved = self.build(self.plan(heads_removed), recipe, f"candidate-{recipe.name}-{heads_removed}"
                               f"{self.suffix}", "candidate")
            self.measure(saved)
            self.journal.record(key, saved)
        if saved.benchmark is not None:
            self.latency_model.observe(recipe.name, self.flops(heads_removed), saved.benchmark.p50_ms)
        return saved

    def build(self, plan: PruningPlan, recipe: Recipe, file_name: str, label: str,
              baseline: bool = False) -> BuiltArtifact:
        recover = not baseline and self.options.recover_steps > 0 and plan.heads_removed > 0
        if recover and plan.heads_removed in self._recovered:
            model = copy.deepcopy(self._recovered[plan.heads_removed]).eval()
        elif recover:
            model = copy.deepcopy(self.recovered(plan))  # quantization must not touch the kept recovered weights
        else:
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
            export_seconds=round(exported.export_seconds, 2), cached_export=exported.cached,
        )
        return artifact

    def measure(self, artifact: BuiltArtifact, baseline: bool = False) -> None:
        """Benchmark on the profile's device and measure validation quality through the runtime."""
        self.progress.note(f"  benchmarking on {self.profile.name} ({self.options.bench_runs} runs, "
                           f"{self.profile.threads} threads)")
        artifact.benchmark = benchmark_on(self.device_link, self.work / artifact.path,
                                          self.remap(self.example, baseline), self.runtime, self.profile.threads,
                                          self.options.bench_warmup, self.options.bench_runs,
                                          device=self.profile.name, profile=self.profile)
        run = load_artifact(self.work / artifact.path)
        artifact.validation_quality = self.task.runtime_quality(
            run, "validation", None if baseline else lambda inputs: self.remap(inputs, False))
        self.progress.note(f"  p50 {artifact.benchmark.p50_ms:.2f} ms, peak {artifact.benchmark.peak_rss_mb:.0f} MB, "
                           f"validation {artifact.validation_quality.metric} {artifact.validation_quality.value:.4f}")


def fit(
    model: "Task | str | Path",
    task: str | None = None,
    data: str | Path | None = None,
    *,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    **task_options: Any,
) -> FitResult:
    """Fit a model to a device: `fit("my-model/", "classification", "reviews.csv", device="pi5",
    budget=Budget(max_mb=25))`, or `fit(task)` with a Task built in Python (e.g. `bundled_task("minilm-bbc")`).

    `task_options` go to the task (text_column, label_column, max_length, ratios, seed, head, ...).
    """
    from edgeprune.tasks import make_task

    if isinstance(model, Task):
        if task is not None or data is not None or task_options:
            raise UserInputError("pass either a Task, or a model folder with a task kind and data, not both")
        the_task = model
    else:
        if task is None or data is None:
            raise UserInputError("fit(model_folder, task, data): name the task kind (classification, embedding, "
                                 "causal-lm, image-classification) and the data file or folder")
        the_task = make_task(task, model, data, **task_options)
    return fit_task(the_task, device, budget, out, options, progress, resume)


def fit_task(
    task: Task,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
) -> FitResult:
    """Fit `task`'s model to `device` within `budget`; write the artifact, result.json and the reports to `out`.

    Returns the FitResult; when nothing fits, its status is "budget_not_met", `fitted` is the closest
    candidate and `binding_budgets` / `suggestions` say what stood in the way.
    """
    started = time.perf_counter()
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    budget = budget or Budget.for_device(profile)
    options = options or FitOptions()
    runtime = options.runtime or profile.runtime
    RUNTIMES.get(runtime)
    recipes = tuple(recipe_for_runtime(name, runtime).name for name in (options.recipes or FIT_LADDERS[runtime]))
    progress = progress or task.progress
    out = Path(out) if out is not None else default_out_dir()
    work = prepare_out_dir(out, resume)
    timings: dict[str, float] = {}
    journal: _Journal | None = None
    try:
        fingerprint = _fingerprint(task, options, runtime, recipes, profile)
        journal = _Journal(work / JOURNAL_NAME, fingerprint, resume)
        mark = time.perf_counter()
        teacher = task.teacher()
        timings["teacher"] = time.perf_counter() - mark
        progress.note(f"dense teacher: test {teacher.test.metric} {teacher.test.value:.4f} (PyTorch)")
        progress.note(f"data split (seed {task.seed}): {_split_summary(task)}")

        mark = time.perf_counter()
        raw_scores = _scores(task, teacher.model, options, progress, journal)
        scores = raw_scores.normalize_per_layer(options.normalize)
        timings["scoring"] = time.perf_counter() - mark

        vocabulary = _vocabulary(task, options, progress)
        blocks = adapter_for(teacher.model).attention_blocks(teacher.model)
        with open_transport(profile.endpoint, profile.python) as device_link:
            builder = _Builder(teacher.model, scores, task, options, work, progress, runtime, profile, device_link,
                               journal, vocabulary)
            mark = time.perf_counter()
            dense = _dense_baseline(builder, blocks, runtime, journal)
            candidates, trials = _search(builder, blocks, budget, recipes, teacher.validation, progress)
            timings["search"] = time.perf_counter() - mark

        mark = time.perf_counter()
        fitted, binding, suggestions = _choose(candidates, budget, teacher.validation)
        _keep_only(fitted, candidates, work)
        for artifact in (dense, fitted):
            run = load_artifact(work / artifact.path)
            trimmed = artifact is fitted and vocabulary is not None
            artifact.quality = task.runtime_quality(run, "test", (lambda i: builder.remap(i, False)) if trimmed
                                                    else None)
            if artifact.quality.metric in ACCURACY_METRICS:
                artifact.test_accuracy = artifact.quality.value
        timings["evaluation"] = time.perf_counter() - mark

        shipped = _ship(task, work, fitted, vocabulary)
        fits = not binding
        message = _summary(fits, fitted, budget, binding, suggestions)
        result = FitResult(
            status="fit" if fits else "budget_not_met", message=message, device=profile.name, budget=budget,
            task=task.describe(),
            teacher_test_accuracy=teacher.test.value if teacher.test.metric in ACCURACY_METRICS else None,
            head_scores=raw_scores.to_dict(), dense=dense, fitted=fitted, trials=trials,
            reproduce=_reproduce(task, profile, budget, options, fitted, runtime), out_dir=str(out),
            elapsed_s=round(time.perf_counter() - started, 1), timings_s={k: round(v, 1) for k, v in timings.items()},
            candidates=candidates, pareto=pareto_front(candidates, budget), teacher_quality=teacher.test,
            binding_budgets=binding, suggestions=suggestions,
            per_class_regressions=per_class_regressions(dense.quality.details, fitted.quality.details),
            shipped_files=shipped, device_profile=_profile_facts(profile),
        )
        write_json_atomic(work / "result.json", to_jsonable(result))
        write_text_atomic(work / "report.md", render_markdown(result))
        write_text_atomic(work / "report.html", render_html(result))
        (work / JOURNAL_NAME).unlink()
        if out.exists():
            out.rmdir()  # empty: prepare_out_dir refused anything else
        os.replace(work, out)
        progress.note(message)
        return result
    except BaseException:
        if journal is None or not journal.data["candidates"]:
            shutil.rmtree(work, ignore_errors=True)
        else:
            progress.note(f"stopped; finished candidates are kept in {work}: continue with --resume {out}")
        raise


def _split_summary(task: Task) -> str:
    from edgeprune.data import describe_split

    if not any(task.splits.sizes().values()):  # tensors given directly (module tasks)
        return "; ".join(f"{name} {task.count(name)}" for name in ("calibration", "validation", "test"))
    split = describe_split(task.splits)
    parts = []
    for name, size in split["sizes"].items():
        balance = split["class_balance"].get(name) or {}
        parts.append(f"{name} {size}" + (f" ({', '.join(f'{k}: {v}' for k, v in balance.items())})" if balance
                                         else ""))
    return "; ".join(parts)


def _profile_facts(profile: DeviceProfile) -> dict[str, Any]:
    facts = to_jsonable(profile)
    return {k: v for k, v in facts.items() if k not in ("endpoint", "source", "python")} if isinstance(facts, dict) \
        else {}


def _fingerprint(task: Task, options: FitOptions, runtime: str, recipes: tuple[str, ...],
                 profile: DeviceProfile) -> str:
    payload = json.dumps([task.cache_key(), to_jsonable(options), runtime, recipes, profile.name], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _scores(task: Task, model: nn.Module, options: FitOptions, progress: Progress, journal: _Journal) -> HeadScores:
    if journal.data["scores"] is not None:
        progress.note("head scores: finished before (resumed)")
        return HeadScores.from_dict(journal.data["scores"])
    batches = task.batches("calibration", options.scoring_batch_size, limit=options.scoring_examples)
    with progress.task(f"scoring heads ({options.criterion})", min(options.scoring_examples,
                                                                   task.count("calibration"))) as bar:
        scores = score_heads(model, bar.track(batches), options.criterion, loss_fn=task.loss)
    journal.data["scores"] = scores.to_dict()
    journal.save()
    return scores


def _vocabulary(task: Task, options: FitOptions, progress: Progress) -> VocabularyMap | None:
    if not options.trim_vocabulary:
        return None
    vocabulary = task.vocabulary()
    if vocabulary is None:
        raise UserInputError(f"vocabulary trimming applies to text encoders; the {task.kind} task has no trimmable "
                             "vocabulary; drop --trim-vocab")
    progress.note(f"vocabulary trimmed to the {len(vocabulary.kept_ids)} of {vocabulary.original_size} tokens seen "
                  "in the calibration and validation data (others become the unknown token)")
    return vocabulary


def _dense_baseline(builder: _Builder, blocks: list, runtime: str, journal: _Journal) -> BuiltArtifact:
    saved = journal.artifact("dense")
    if saved is not None and (builder.work / saved.path).is_file():
        return saved
    dense = builder.build(PruningPlan.dense([b.num_heads for b in blocks]), RECIPES.get(FP32_RECIPE[runtime]),
                          BASELINE_STEM + builder.suffix, "dense baseline", baseline=True)
    builder.measure(dense, baseline=True)
    journal.record("dense", dense)
    return dense


def _search(builder: _Builder, blocks: list, budget: Budget, recipes: tuple[str, ...], reference: Quality,
            progress: Progress) -> tuple[list[BuiltArtifact], list[Trial]]:
    """Per recipe, the fewest heads removed that meet the resource budgets; every candidate built is returned."""
    removable = sum(max(0, b.num_heads - builder.options.min_heads_per_layer) for b in blocks)
    step = max(1, len(blocks))  # one head per layer on average per step
    counts = sorted(set(range(0, removable + 1, step)) | {removable})
    trials: list[Trial] = []
    built: dict[tuple[str, int], BuiltArtifact] = {}
    for recipe in (RECIPES.get(name) for name in recipes):
        known_over, known_fit = -1, None
        while True:
            open_counts = [c for c in counts if known_over < c and (known_fit is None or c < known_fit)]
            # within the size model's error of the line, a real file settles what the model cannot
            hopeful = [c for c in open_counts
                       if budget.size_fits(int(builder.predict_bytes(c, recipe) / SIZE_MODEL_SLACK))]
            hopeful = _fast_enough(builder, recipe, hopeful, budget, known_fit)
            if not hopeful:
                break
            count = hopeful[0]
            artifact = builder.candidate(recipe, count)
            artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality,
                                           reference)
            resources_met = all(c.passed for c in artifact.checks if not c.name.endswith("(validation)"))
            trials.append(Trial(recipe.name, count, artifact.predicted_bytes, artifact.file_bytes, resources_met,
                                artifact.export_seconds, artifact.cached_export))
            built[(recipe.name, count)] = artifact
            _note_best(progress, built.values())
            if resources_met:
                known_fit = count
            else:
                known_over = count
                failed = ", ".join(f"{c.name} {_fmt(c.value)} > {_fmt(c.limit)} {c.unit}".strip()
                                   for c in artifact.checks if not c.passed and not c.name.endswith("(validation)"))
                progress.note(f"  over budget ({failed}): removing more heads")
        for count in counts:
            if (recipe.name, count) not in built and (known_fit is None or count < known_fit):
                reason = ("a candidate with more heads removed was already over budget" if count < known_over
                          else "the size or latency model predicts it is over budget")
                trials.append(Trial(recipe.name, count, builder.predict_bytes(count, recipe),
                                    note=f"skipped: {reason}"))
        if known_fit == 0 and built[(recipe.name, 0)].meets_budget:
            progress.note(f"{recipe.name} meets every budget with no head removed: lower-fidelity recipes cannot "
                          "do better")
            break
    if not built:  # nothing was even predicted to fit: build the smallest candidate to show how close it gets
        recipe = RECIPES.get(recipes[-1])
        progress.note(f"nothing is predicted to fit; building the smallest candidate ({recipe.name}, "
                      f"{counts[-1]} heads removed)")
        artifact = builder.candidate(recipe, counts[-1])
        artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality,
                                       reference)
        trials.append(Trial(recipe.name, counts[-1], artifact.predicted_bytes, artifact.file_bytes,
                            artifact.meets_budget, note="closest: the smallest candidate"))
        built[(recipe.name, counts[-1])] = artifact
    return list(built.values()), trials


def _fast_enough(builder: _Builder, recipe: Recipe, hopeful: list[int], budget: Budget,
                 known_fit: int | None) -> list[int]:
    """Drop counts the latency model predicts to be too slow (keep the most pruned one to settle it)."""
    if budget.max_latency_ms is None or not hopeful:
        return hopeful
    kept = []
    for count in hopeful:
        predicted = builder.latency_model.predict(recipe.name, builder.flops(count),
                                                  builder.predict_bytes(count, recipe))
        if predicted is None or predicted <= budget.max_latency_ms * LATENCY_MODEL_SLACK:
            kept.append(count)
    if not kept and known_fit is None:
        kept = [hopeful[-1]]
    return kept


def _choose(candidates: list[BuiltArtifact], budget: Budget,
            reference: Quality) -> tuple[BuiltArtifact, list[str], list[str]]:
    """The best validation quality among candidates meeting every budget; else the closest, with what binds."""
    meeting = [c for c in candidates if c.meets_budget]
    if meeting:
        better = reference.higher_is_better
        best = max(meeting, key=lambda c: (c.validation_quality.value if better else -c.validation_quality.value,
                                           -c.file_bytes))
        best.label = "fitted"
        return best, [], []
    closest = min(candidates, key=lambda c: (sum(not check.passed for check in c.checks), c.file_bytes))
    closest.label = "closest"
    binding = sorted({check.name for check in closest.checks if not check.passed})
    return closest, binding, _suggestions(candidates, budget, binding)


def _suggestions(candidates: list[BuiltArtifact], budget: Budget, binding: list[str]) -> list[str]:
    """What would make it fit, from the values measured: the least each binding budget would need."""
    suggestions = []
    values: dict[str, list[float]] = {}
    for candidate in candidates:
        for check in candidate.checks:
            if check.value is not None:
                values.setdefault(check.name, []).append(check.value)
    for name in binding:
        seen = values.get(name)
        if name == "size":
            smallest = min(seen) if seen else None
            suggestions.append("needs a smaller recipe (e.g. 4-bit weights: --recipe int4) or "
                               + (f"raise --max-mb to {smallest:.1f}" if smallest else "raise --max-mb"))
        elif name.startswith("latency") and seen:
            suggestions.append(f"raise --max-latency-ms to {min(seen):.1f} (the fastest candidate measured)")
        elif name == "peak memory" and seen:
            suggestions.append(f"raise --max-memory-mb to {min(seen):.0f}")
        elif name == "energy per inference" and seen:
            suggestions.append(f"raise --max-energy-mj to {min(seen):.1f}")
        elif name.endswith("(validation)") and seen:
            best = max(seen) if name.startswith("min") else min(seen)
            suggestions.append(f"relax --min-quality to {best:.4f} (the best candidate measured)")
        else:
            suggestions.append(f"{name}: no measured value; connect the device or drop the budget")
    return suggestions


def pareto_front(candidates: list[BuiltArtifact], budget: Budget) -> list[str]:
    """Paths of candidates no other candidate beats on validation quality, size and latency at once."""
    def axes(c: BuiltArtifact) -> tuple[float, float, float] | None:
        if c.validation_quality is None or c.benchmark is None:
            return None
        sign = 1 if c.validation_quality.higher_is_better else -1
        return sign * c.validation_quality.value, -c.file_bytes, -budget.latency(c.benchmark)

    scored = [(c, axes(c)) for c in candidates if axes(c) is not None]
    front = []
    for candidate, mine in scored:
        dominated = any(all(o >= m for o, m in zip(other, mine, strict=True)) and other != mine
                        for _, other in scored)
        if not dominated:
            front.append(candidate.path)
    return front


def _keep_only(fitted: BuiltArtifact, candidates: list[BuiltArtifact], work: Path) -> None:
    """Keep the chosen candidate as model.pte / model.tflite; drop the other candidates' files."""
    name = ARTIFACT_STEM + Path(fitted.path).suffix
    os.replace(work / fitted.path, work / name)
    for leftover in work.glob("candidate-*"):
        leftover.unlink()
    for candidate in candidates:
        if candidate is not fitted:
            candidate.path = f"(not kept) {candidate.path}"
    fitted.path = name


def _ship(task: Task, work: Path, fitted: BuiltArtifact, vocabulary: VocabularyMap | None) -> list[str]:
    """What the app needs: tokenizer or preprocessing, labels, the vocabulary map, the input signature."""
    shipped = task.ship(work)
    if vocabulary is not None:
        vocabulary.save(work / VOCABULARY_NAME)
        shipped.append(VOCABULARY_NAME)
    signature = {
        "artifact": fitted.path, "runtime_recipe": fitted.recipe,
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


def _note_best(progress: Progress, built: Any) -> None:
    meeting = [a for a in built if a.meets_budget]
    if meeting:
        best = max(meeting, key=lambda a: a.validation_quality.value * (1 if a.validation_quality.higher_is_better
                                                                         else -1))
        progress.note(f"  best so far: {best.recipe}, {best.heads_removed} heads removed, {best.file_bytes / 1e6:.2f} "
                      f"MB, validation {best.validation_quality.metric} {best.validation_quality.value:.4f}")


def _fmt(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _summary(fits: bool, fitted: BuiltArtifact, budget: Budget, binding: list[str], suggestions: list[str]) -> str:
    size = f"{fitted.file_bytes / 1e6:.2f} MB"
    heads = f"{fitted.heads_removed} of {sum(fitted.plan['num_heads'])} heads removed"
    measured = "; ".join(f"{c.name} {_fmt(c.value)}{(' ' + c.unit) if c.unit else ''} (limit {_fmt(c.limit)})"
                         for c in fitted.checks)
    if fits:
        return f"fits every budget with {fitted.recipe}, {heads}: {measured or size}"
    return (f"cannot meet {', '.join(binding)}: the closest candidate is {size} ({fitted.recipe}, {heads}; "
            f"{measured}); {'; '.join(suggestions)}")


def _reproduce(task: Task, profile: DeviceProfile, budget: Budget, options: FitOptions,
               fitted: BuiltArtifact, runtime: str) -> dict[str, object]:
    import transformers

    from edgeprune import __version__

    return {
        "command": shlex.join(["edgeprune", *sys.argv[1:]]) if Path(sys.argv[0]).name == "edgeprune" else None,
        "task": task.describe(), "model_path": str(task.model_path), "seed": task.seed,
        "device": profile.name, "budget": to_jsonable(budget), "options": to_jsonable(options),
        "criterion": options.criterion, "strategy": fitted.plan["strategy"], "normalize": options.normalize,
        "compensation": "mean head outputs folded into the output-projection bias" if options.compensate else None,
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
