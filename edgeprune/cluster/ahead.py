"""Candidate builds started ahead on Ray: while the driver measures one candidate (verifies the artifact it was
given, benchmarks it), the candidates the search ranks next are built as Ray tasks on the cluster's workers:
pruned here, then quantized, exported, verified and evaluated through the runtime there (`BuildJob.run`). Their
bytes come back through Ray's object store (or, with a shared folder every node mounts, through that folder) and
land in the content-keyed export cache; their validation quality lands where the builder looks for it. The build
that needs one then finds both (the driver still verifies the file it ships).

The search itself does not change: the searcher proposes a batch, its first candidate is built here, and results
are told one by one in its order, so it builds what it would build without Ray and makes the same choice; a
candidate built ahead that the search later skips costs a worker's time and nothing else. Recovered candidates
are distilled on the driver (the recovered weights of a line seed the next recovery there). Before each
benchmark the driver waits for the builds in flight, so that none runs beside a benchmark on this machine (one
benchmark at a time, on a quiet machine, or the figures are noise).
"""

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgeprune.cache import write_entry
from edgeprune.export import RUNTIMES, ExportJob, content_key
from edgeprune.export.artifacts import export_producers, runtime_of
from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES, Recipe
from edgeprune.search.benchmarkers import WorkElsewhere
from edgeprune.search.build_job import BuildJob, BuildOutcome, RecoverySpec
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.recovering import line_parent, may_start_from, needs_recovery, record_recovery, recovery_start
from edgeprune.search.searcher import Proposal
from edgeprune.search.space import Shape
from edgeprune.tasks.base import Task

AUTO_DEPTH = 2  # builds ahead when the cluster has other machines and the user said nothing


def build_on_worker(job: BuildJob, task: Task, teacher: nn.Module | None, shared_folder: Path | None
                    ) -> BuildOutcome:
    """Runs in a Ray worker: the candidate recovered (if asked), built, verified and evaluated there (progress
    off: a worker's lines would interleave with the driver's)."""
    task.progress = Progress(enabled=False)
    return job.run(task, teacher, shared_folder)


def nodes_elsewhere() -> list[str]:
    """The ids of the live nodes of the connected cluster that run on another machine than this process and
    have a CPU to build on."""
    import ray

    here = ray.util.get_node_ip_address()
    return [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeManagerAddress"] != here
            and node.get("Resources", {}).get("CPU", 0) >= 1]


class RayBuildsAhead:
    """Keeps up to `depth` builds of the candidates ranked next running on Ray (the process must be connected),
    preferring `nodes` (ids of nodes on other machines, taken in turn) so that a build does not take this
    machine's cores; with none, wherever Ray places them. `shared_folder`: a folder at the same path on every
    node (a network file system); the workers write the artifacts there and only their qualities travel through
    the object store."""

    def __init__(self, builder: CandidateBuilder, elsewhere: WorkElsewhere, depth: int, progress: Progress,
                 shared_folder: Path | None = None, nodes: list[str] | None = None) -> None:
        import ray

        self.ray = ray
        self.remote = ray.remote(num_cpus=1)(build_on_worker)  # an export keeps one core busy
        self.builder, self.depth, self.progress, self.shared_folder = builder, depth, progress, shared_folder
        self.elsewhere = elsewhere  # where the qualities the builds measured go, for the builder to take
        self.nodes = list(nodes or [])
        self.task = ray.put(portable_copy(builder.task))  # once, not with every job
        self.teacher: Any = None  # put once, when a build ahead first recovers
        self.inflight: dict[tuple[str, Shape], tuple[Any, Path]] = {}
        self.recoveries: dict[tuple[str, Shape], BuildOutcome] = {}  # landed, taken when the search builds them
        self.started_from: dict[tuple[str, Shape], Shape | None] = {}  # where each recovery ahead started
        self.considered: set[tuple[str, Shape]] = set()
        self.proposed: set[tuple[str, Shape]] = set()  # built here: a build ahead of one of these was used
        self.landed: set[tuple[str, Shape]] = set()
        self.started = 0

    def before_build(self, proposal: Proposal, upcoming: list[Proposal]) -> None:
        """Land the build of the candidate about to be built here, if it ran elsewhere; start the next ones."""
        key = (proposal.recipe, proposal.shape)
        self._land(key)
        self._adopt_recovery(key)
        self.considered.add(key)
        self.proposed.add(key)
        # structures to be recovered before the next candidates: one may be where a recovery ahead would start
        recovering = [s for s in (proposal.shape, *(k[1] for k in self.inflight)) if self._unrecovered(s)]
        for candidate in upcoming:
            key = (candidate.recipe, candidate.shape)
            recovered_first = tuple(s.structure for s in recovering)
            if self._unrecovered(candidate.shape):
                recovering.append(candidate.shape)
            if key in self.considered or len(self.inflight) >= self.depth:
                continue
            self.considered.add(key)
            job = candidate_build_job(self.builder, candidate.shape, RECIPES.get(candidate.recipe), recovered_first)
            if job is None:
                continue
            if job.recovery is not None and self.teacher is None:
                self.teacher = self.ray.put(self.builder.teacher)
            teacher = self.teacher if job.recovery is not None else None
            if job.recovery is not None:
                self.started_from[key] = job.recovery.parent
            self.inflight[key] = (self._placed().remote(job, self.task, teacher, self.shared_folder),
                                  job.export.cache_file)
            self.started += 1
            self.progress.note(f"  build of {candidate.recipe}, {candidate.shape.describe()} started ahead on Ray")

    def _unrecovered(self, shape: Shape) -> bool:
        return needs_recovery(self.builder, shape) and shape.structure not in self.builder.shared.recovered

    def _placed(self) -> Any:
        """The remote function, placed on the next node elsewhere (soft: anywhere if that node is gone)."""
        if not self.nodes:
            return self.remote
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self.nodes[self.started % len(self.nodes)]
        return self.remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True))

    def quiet(self) -> None:
        """Wait until no build runs (they land in the export cache): called before every benchmark."""
        for key in list(self.inflight):
            self._land(key)

    def _land(self, key: tuple[str, Shape]) -> None:
        """Wait for the build of `key`, if one runs; put its bytes in the export cache and its quality where the
        builder finds it. A build that failed or was rejected there is built here (which reports a real failure)."""
        if key not in self.inflight:
            return
        reference, target = self.inflight.pop(key)
        try:
            outcome: BuildOutcome = self.ray.get(reference)
        except Exception as error:  # noqa: BLE001 - the build here redoes it and reports a real failure itself
            self.progress.note(f"  a build started ahead failed ({type(error).__name__}); building it here")
            return
        if not outcome.usable:
            return
        data = outcome.data
        if data is None and self.shared_folder is not None:
            shared = self.shared_folder / outcome.file_name
            if not shared.is_file():
                self.progress.warn(f"a build ahead wrote {shared}, which this machine cannot read; is the shared "
                                   "folder mounted at the same path on every node? Building it here")
                return
            data = shared.read_bytes()
        if data is None:
            return
        landed = target.parent / outcome.file_name  # named after its weights, known there
        write_entry(landed, data, export_producers(runtime_of(landed) or "executorch"))
        if outcome.recovered is not None:
            self.recoveries[key] = outcome
        self.progress.note(f"  the build ahead of {key[0]}, {key[1].describe()} landed ({outcome.seconds:.0f} s on "
                           "a worker)")
        if outcome.validation_quality is not None:
            self.elsewhere.measured(outcome.digest, "validation", outcome.validation_quality)
        self.landed.add(key)

    def _adopt_recovery(self, key: tuple[str, Shape]) -> None:
        """The candidate about to be built was recovered on a worker: keep that recovery as if it had run here,
        provided it started from the weights the search here starts it from now (else it is recovered here)."""
        outcome, started_from = self.recoveries.pop(key, None), self.started_from.pop(key, None)
        structure = key[1].structure
        if outcome is None or structure in self.builder.shared.recovered:
            return
        parent = line_parent(self.builder, structure)
        if started_from != parent:
            self.progress.note(f"  the recovery ahead of {structure.describe()} started from other weights than "
                               "this search starts it from now; recovering it here")
            return
        self.progress.note(f"  {structure.describe()} was recovered ahead on a worker")
        record_recovery(self.builder, structure, outcome.recovered, parent, outcome.distillation,
                        outcome.recovered_quality)

    def close(self) -> str:
        """Cancel what still runs; a line saying what the builds ahead did."""
        for reference, _ in self.inflight.values():
            self.ray.cancel(reference, force=True)
        cancelled = len(self.inflight)
        self.inflight = {}
        used = len(self.landed & self.proposed)
        return (f"candidate builds started ahead on Ray: {self.started} ({used} used here, "
                f"{len(self.landed) - used} not needed by the search, {cancelled} cancelled when it ended)")


def start_builds_ahead(builder: CandidateBuilder, elsewhere: WorkElsewhere, depth: int | None,
                       shared_folder: Path | None, progress: Progress) -> RayBuildsAhead | None:
    """Builds ahead on the connected Ray cluster: `depth` of them, or with None (auto) two when some node is
    another machine and none when every node is this one (a build there only competes with the benchmarks,
    which wait for it). They are placed on the other machines' nodes when there are any."""
    nodes = nodes_elsewhere()
    if depth is None and not nodes:
        progress.note("builds ahead: off (every node of the Ray cluster is this machine, where a build only "
                      "competes with the benchmarks; --builds-ahead N starts them anyway)")
        return None
    ahead = RayBuildsAhead(builder, elsewhere, AUTO_DEPTH if depth is None else depth, progress, shared_folder,
                           nodes)
    elsewhere.before_benchmark.append(ahead.quiet)  # no build beside a benchmark
    return ahead


def portable_copy(task: Task) -> Task:
    """The task as a worker needs it: its data encoded already (no tokenizer or model folder needed there), and
    without the driver's progress, whose stream is this process's (the worker sets its own)."""
    task.encode("validation")
    portable = copy.copy(task)
    portable.progress = None  # type: ignore[assignment] - set again in build_on_worker
    return portable


def candidate_build_job(builder: CandidateBuilder, shape: Shape, recipe: Recipe,
                        recovering: tuple[Shape, ...] = ()) -> BuildJob | None:
    """The candidate's build as a function of its inputs, to start early elsewhere (`edgeprune.cluster.ahead`);
    None when its export is cached already, or when it is to be recovered and one of `recovering` (structures
    recovered before it) may become the recovered weights it starts from (it would start from other weights
    than the search here would give it)."""
    trimmed, remap, calibration = shape.trim_vocabulary, builder.artifacts.remap, builder.artifacts.calibration
    example = remap(builder.facts.example, trimmed)
    suffix = RUNTIMES.get(recipe.runtime).suffix
    exports = builder.task.cache_dir / "exports"
    verify_on = [remap(i, trimmed) for i in builder.artifacts.verify_inputs]
    name = f"candidate ({recipe.name})"
    vocabulary = builder.vocabulary if trimmed else None
    if needs_recovery(builder, shape) and shape.structure not in builder.shared.recovered:
        structure = shape.structure
        if any(may_start_from(structure, other) for other in recovering):
            return None
        student, parent = recovery_start(builder, structure)
        return BuildJob(ExportJob(student, example, recipe, calibration(recipe, trimmed),
                                  exports / f"recovered{suffix}"),  # named after recovery, by its weights
                        verify_on, vocabulary, name, RecoverySpec(builder.options, parent, torch.get_num_threads()))
    model = builder.candidate_model(shape)
    inputs = calibration(recipe, trimmed)
    target = exports / f"{content_key(model, recipe, example, inputs)}{suffix}"
    if target.exists():
        return None
    return BuildJob(ExportJob(model, example, recipe, inputs, target), verify_on, vocabulary, name)
