"""`fit`: search the space of compressed candidates for the best validation quality that meets every budget.

A candidate is a recipe (quantization + runtime) applied to a structure: heads removed, FFN neurons removed,
layers removed, vocabulary trimmed (`edgeprune.search.space`). Cheap first: the exact size model and a
latency model fitted to the device's measurements say which structures can fit; the PyTorch validation
quality of a structure (seconds) bounds what its artifacts can reach; only candidates that can still win
are exported, verified and evaluated through the runtime, and only those that can still win after that are
benchmarked on the device. Validation qualities within a tolerance (one standard error by default) are a
tie, which the least compressed candidate wins. The test split only measures the winner and the dense
baseline; it never takes part in a decision.

Each finished candidate is journaled in the hidden work folder, so `resume=True` continues an
interrupted fit without redoing anything finished; the output folder appears only when complete.
"""

import dataclasses
import json
import os
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.devices.setup import device_python
from edgeprune.devices.transports import open_transport
from edgeprune.errors import DeviceUnreachableError, Interrupted, UserInputError
from edgeprune.progress import Progress
from edgeprune.quantize import (
    FP32_RECIPE,
    RECIPES,
    fit_ladder,
)
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.report import render_html, render_markdown
from edgeprune.runtimes import RUNTIMES
from edgeprune.search.benchmarkers import WorkElsewhere, benchmarker_for
from edgeprune.search.budget import Budget
from edgeprune.search.builder import CandidateBuilder, journaled_artifact
from edgeprune.search.choice import ACCURACY_METRICS, choose, pareto_front, quality_tolerance
from edgeprune.search.estimate import HostEstimator
from edgeprune.search.generator_figures import (
    adopt_teacher_quality,
    agreement_with_teacher,
    benchmark_generator,
    quality_from_pytorch,
    teacher_reference,
)
from edgeprune.search.journal import JOURNAL_NAME, Journal, prepare_out_dir
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import RECOVERED_FOLDER, recovery_cost, settle_quantization_aware
from edgeprune.search.result import BuiltArtifact, FitResult, fit_status
from edgeprune.search.scoring import journaled_head_scores, normalization
from edgeprune.search.searcher import best_first_search
from edgeprune.search.shared import SharedWork, dense_head_means
from edgeprune.search.ship import keep_only, reproduce, ship_files, summary
from edgeprune.search.space import Shape
from edgeprune.serialization import to_jsonable, write_text_atomic
from edgeprune.tasks.base import Task, Teacher, example_count
from edgeprune.tasks.causal_lm import CausalLMTask
from edgeprune.tasks.compatibility import DECODER
from edgeprune.tasks.metrics import per_class_regressions

if TYPE_CHECKING:  # Ray is an extra: the pool is imported only where one is made
    from edgeprune.cluster import BoardPool
    from edgeprune.cluster.ahead import RayBuildsAhead

BASELINE_STEM = "dense-fp32"


def default_out_dir() -> Path:
    """A new folder named for the time under $EDGEPRUNE_RUNS (default: runs/ in the working folder)."""
    return Path(os.environ.get("EDGEPRUNE_RUNS") or "runs") / datetime.now().strftime("fit-%Y%m%d-%H%M%S")


def fit(
    model: "Task | str | Path",
    task: str | None = None,
    data: "str | Path | Any" = None,  # a file or folder, or a datasets.Dataset
    *,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    boards: "BoardPool | None" = None,
    builds_ahead: int | None = 0,
    shared_folder: Path | None = None,
    **task_options: Any,
) -> FitResult:
    """Fit a model to a device: `fit("my-model/", "classification", "reviews.csv", device="pi5",
    budget=Budget(max_mb=25))`, or `fit(task)` with a Task built in Python (e.g. `bundled_task("minilm-bbc")`).

    `task_options` go to the task (text_column, label_column, max_length, ratios, seed, head, ...); `boards`,
    `builds_ahead` and `shared_folder` (a lab on Ray) are `fit_task`'s.
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
    return fit_task(the_task, device, budget, out, options, progress, resume, boards=boards,
                    builds_ahead=builds_ahead, shared_folder=shared_folder)


def fit_task(
    task: Task,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    shared: SharedWork | None = None,
    boards: "BoardPool | None" = None,
    builds_ahead: int | None = 0,
    shared_folder: Path | None = None,
) -> FitResult:
    """Fit `task`'s model to `device` within `budget`; write the artifact, result.json and the reports to `out`.

    Returns the FitResult; when nothing fits, its status is "budget_not_met", `fitted` is the closest
    candidate and `binding_budgets` / `suggestions` say what stood in the way. When the device does not answer
    (and `options.require_device` is off) the figures are estimated here and a fit's status is "fit (estimated)";
    that is said first, before any work. `shared` carries the device-independent work of a fleet from one
    device's fit to the next (`fit_fleet`). `boards`, a lab pool on Ray, benchmarks on its boards of this profile
    instead of the profile's own connection; `builds_ahead` > 0 (this process connected to Ray) builds that
    many of the candidates ranked next on Ray workers while one is measured (`edgeprune.cluster.ahead`), their
    artifacts sent back through Ray's object store, or written to `shared_folder` when every node mounts it;
    None: two when the cluster has a node on another machine, else none.
    """
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    budget = budget or Budget.for_device(profile)
    options = options or FitOptions()
    runtimes = options.runtime or profile.searched_runtimes
    for name in runtimes:
        RUNTIMES.get(name).require()  # before the teacher is trained: a missing runtime is the first thing said
    runtime = runtimes[0]  # the dense baseline's
    for name in ("min_decode_tps", "max_ttft_ms"):
        if getattr(budget, name) is not None and not isinstance(task, CausalLMTask):
            raise UserInputError(f"--{name.replace('_', '-')} is a generator's budget; task {task.name} is not a "
                                 "causal-lm")
    if isinstance(task, CausalLMTask) and task.attention == "auto" and any(
            profile.runner_for(name) == "native" for name in runtimes):
        # a native runner (torch-free) links no ExecuTorch LLM kernels; the caller's task is left as it was
        task = dataclasses.replace(task, attention="portable")
    # a decoder's ladder holds the recipes that store its output layer apart
    recipes = fit_ladder(runtimes, options.recipes, output_layer=DECODER in task.model_kinds)
    progress = progress or task.progress
    out = Path(out) if out is not None else default_out_dir()
    work, created = prepare_out_dir(out, resume)
    timings: dict[str, float] = {}
    journal: Journal | None = None
    shared = shared if shared is not None else SharedWork()
    try:
        settings = _settings(task, options, runtimes, recipes, profile, budget)
        shared.bind(shared_key(settings["model, data and task options"], options))
        journal = Journal(work / JOURNAL_NAME, settings, resume)
        if journal.damage:
            progress.warn(journal.damage)
        # first, before any work: whether this fit is measured on the device or estimated here (or, with
        # require_device, refused)
        pool = boards if boards is not None and boards.covers(profile.name) else None
        estimator = _estimator_if_unreachable(profile, options, progress, pool)
        mark = time.perf_counter()
        if shared.teacher is None:
            shared.teacher = task.teacher()
        else:
            shared.count("teacher")
        teacher = shared.teacher
        options = settle_quantization_aware(options, teacher.model, recipes, progress)
        timings["teacher"] = time.perf_counter() - mark
        progress.note(f"dense teacher: test {teacher.test.metric} {teacher.test.value:.4f} (PyTorch)")
        progress.note(f"data split (seed {task.seed}): {_split_summary(task)}")

        mark = time.perf_counter()
        means = dense_head_means(teacher.model, task, options, shared) if options.compensate else None
        raw_scores = journaled_head_scores(task, teacher.model, options, progress, journal, shared,
                                           teacher.validation, means)
        scores = raw_scores.normalize_per_layer(normalization(raw_scores, options))
        timings["scoring"] = time.perf_counter() - mark

        vocabulary = vocabulary_for(task, options, progress)
        with open_transport(profile.endpoint, device_python(profile)) as device_link:
            elsewhere = WorkElsewhere()  # what builds ahead on Ray measure, and their pause before a benchmark
            benchmarker = benchmarker_for(profile, options, device_link, estimator, pool)
            builder = CandidateBuilder(teacher.model, scores, task, options, work, progress, runtime, profile,
                                       benchmarker, journal, vocabulary, shared, means, elsewhere,
                                       teacher.validation)
            mark = time.perf_counter()
            dense = _dense_baseline(builder, runtime, journal, teacher)
            ahead = _builds_ahead(builder, elsewhere, builds_ahead, shared_folder, progress)
            limit_s = options.time_limit_minutes * 60 if options.time_limit_minutes is not None else None
            try:
                searched = best_first_search(builder, budget, recipes, teacher.validation, progress, ahead,
                                             limit_s, journal.elapsed_s)
            finally:
                if ahead is not None:
                    progress.note(ahead.close())
            timings["search"] = time.perf_counter() - mark

        mark = time.perf_counter()
        tolerance = quality_tolerance(options, teacher.validation)
        candidates, trials = searched.candidates, searched.trials
        fitted, binding, suggestions = choose(candidates, budget, teacher.validation, tolerance)
        keep_only(fitted, candidates, work)
        reference = teacher_reference(teacher.model)  # the teacher's continuations, once for both programs
        for artifact in (dense, fitted):  # (the dense baseline is never a candidate: the fitted one is measured)
            if artifact.quality_source:
                adopt_teacher_quality(artifact, teacher.test, "test", progress)
            else:
                artifact.quality = builder.artifacts.runtime_quality(artifact, "test")
            if artifact.quality.metric in ACCURACY_METRICS:
                artifact.test_accuracy = artifact.quality.value
            artifact.teacher_agreement = agreement_with_teacher(task, reference, work / artifact.path, progress)
        timings["evaluation"] = time.perf_counter() - mark

        shipped = ship_files(task, work, fitted, vocabulary if fitted.vocabulary_size is not None else None,
                             baseline=dense)  # the dense baseline moves to baseline/; dense.path says so
        # a lab's boards are not this fit's to hold for a generation benchmark
        generation = benchmark_generator(work, fitted.path, profile, progress, estimator is None) if pool is None \
            else None
        shipped += ["generation.json", "generation.md"] if generation is not None else []
        fits = not binding
        message = summary(fits, fitted, budget, binding, suggestions, estimated=estimator is not None,
                          stopped_early=searched.stopped_early)
        result = FitResult(
            status=fit_status(fits, estimated=estimator is not None), message=message, device=profile.name,
            budget=budget, task=task.describe(),
            teacher_test_accuracy=teacher.test.value if teacher.test.metric in ACCURACY_METRICS else None,
            head_scores=raw_scores, dense=dense, fitted=fitted, trials=trials,
            reproduce=reproduce(task, profile, budget, options, fitted, fitted.recipe.runtime, raw_scores),
            out_dir=str(out),
            elapsed_s=round(journal.elapsed_s(), 1), timings_s={k: round(v, 1) for k, v in timings.items()},
            candidates=candidates, pareto=pareto_front(candidates, budget), teacher_quality=teacher.test,
            binding_budgets=binding, suggestions=suggestions,
            per_class_regressions=per_class_regressions(dense.quality.details, fitted.quality.details),
            shipped_files=shipped, device_profile=_profile_facts(profile), quality_tolerance=round(tolerance, 6),
            search_stopped_early=searched.stopped_early, recovery=recovery_cost(builder, fitted.shape),
            generation=generation,
        )
        result.save(work / "result.json")
        write_text_atomic(work / "report.md", render_markdown(result))
        write_text_atomic(work / "report.html", render_html(result))
        shutil.rmtree(work / RECOVERED_FOLDER, ignore_errors=True)  # kept for a resume only
        (work / JOURNAL_NAME).unlink()
        if out.exists():
            out.rmdir()  # empty: prepare_out_dir refused anything else
        os.replace(work, out)
        progress.note(message)
        return result
    except KeyboardInterrupt as interrupt:
        if journal is not None:
            journal.record_stop("interrupted")
        raise Interrupted(f"interrupted; the finished work is kept in {work}: continue with --resume {out}") \
            from interrupt
    except BaseException:
        if journal is not None and journal.has_work:
            journal.record_stop("error")
            progress.note(f"stopped; the finished work is kept in {work}: continue with --resume {out}")
        elif created:  # this call made the folder and nothing in it is worth keeping
            shutil.rmtree(work, ignore_errors=True)
        raise


def _estimator_if_unreachable(profile: DeviceProfile, options: FitOptions, progress: Progress,
                              pool: "BoardPool | None") -> HostEstimator | None:
    """None when the device (or a board of its profile in `pool`) answers; else an estimator from runs here (or
    DeviceUnreachableError when `require_device`). The local machine is always reachable."""
    if pool is not None:
        reason = pool.ping(profile.name)
    elif profile.endpoint.on_this_machine:
        return None
    else:
        reason = _unreachable(profile)
    if reason is None:
        return None
    if options.require_device:
        raise DeviceUnreachableError(f"device {profile.name} is not usable ({reason}); fix the connection, or "
                                     "drop --require-device to fit on estimated figures")
    estimator = HostEstimator.for_profile(profile)
    progress.warn(f"fit (estimated): {profile.name} is not reachable ({reason}); latency, memory and energy are "
                  f"ESTIMATED, not measured: {estimator.describe()}; --require-device makes this an error")
    return estimator


def _builds_ahead(builder: CandidateBuilder, elsewhere: WorkElsewhere, depth: int | None,
                  shared_folder: Path | None, progress: Progress) -> "RayBuildsAhead | None":
    if depth is not None and depth <= 0:
        return None
    from edgeprune.cluster.ahead import start_builds_ahead  # Ray is an extra: imported only when asked for

    return start_builds_ahead(builder, elsewhere, depth, shared_folder, progress)


def _unreachable(profile: DeviceProfile) -> str | None:
    """Why the profile's device does not run a command, or None when it does."""
    with open_transport(profile.endpoint, device_python(profile)) as link:
        return link.unreachable()


def _split_summary(task: Task) -> str:
    from edgeprune.data import describe_split

    if not any(task.splits.sizes().values()):  # tensors given directly (module tasks)
        return "; ".join(f"{name} {example_count(task, name)}" for name in ("calibration", "validation", "test"))
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


def _settings(task: Task, options: FitOptions, runtimes: tuple[str, ...], recipes: tuple[str, ...],
              profile: DeviceProfile, budget: Budget) -> dict[str, Any]:
    """What identifies a fit for resuming: a resume with any of these changed is refused, naming the change (the
    time limit is not one: it says how long to search, not what)."""
    return {"model, data and task options": task.cache_key(),
            "options": to_jsonable(dataclasses.replace(options, time_limit_minutes=None)),
            "runtime": runtimes[0] if len(runtimes) == 1 else list(runtimes),
            "recipes": list(recipes), "device": profile.name, "budget": to_jsonable(budget)}


def shared_key(task_key: str, options: FitOptions) -> str:
    """What device-independent work depends on: the task (its `cache_key`) and the options, less the per-device
    ones."""

    common = dataclasses.replace(options, runtime=None, recipes=None, require_device=False, time_limit_minutes=None)
    return json.dumps([task_key, to_jsonable(common)], sort_keys=True)


def vocabulary_for(task: Task, options: FitOptions, progress: Progress) -> VocabularyMap | None:
    """The trimmed vocabulary when the search may trim (None: the task has none, or trimming is off)."""
    if options.trim_vocabulary is False:
        return None
    vocabulary = task.vocabulary()
    if vocabulary is None and options.trim_vocabulary is None:
        return None
    if vocabulary is None:
        raise UserInputError(f"vocabulary trimming applies to text encoders; the {task.kind} task has no trimmable "
                             "vocabulary; drop --trim-vocab")
    progress.note(f"vocabulary {'trimmed' if options.trim_vocabulary else 'may be trimmed'} to the "
                  f"{len(vocabulary.kept_ids)} of {vocabulary.original_size} tokens seen in the calibration and "
                  "validation data (others become the unknown token)")
    return vocabulary


def _dense_baseline(builder: CandidateBuilder, runtime: str, journal: Journal, teacher: Teacher) -> BuiltArtifact:
    saved = journaled_artifact(journal, "dense")
    if saved is not None and (builder.work / saved.path).is_file():
        return saved
    dense = builder.build(Shape(), RECIPES.get(FP32_RECIPE[runtime]), BASELINE_STEM + builder.suffix,
                          "dense baseline", baseline=True)
    if quality_from_pytorch(builder.task, dense, builder.work / dense.path, teacher.model):
        adopt_teacher_quality(dense, teacher.validation, "validation", builder.progress)
        builder.artifacts.benchmark(dense)
    else:
        builder.artifacts.measure(dense)
    journal.record_candidate("dense", to_jsonable(dense))
    return dense

