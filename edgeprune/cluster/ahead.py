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

from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES
from edgeprune.search.build_job import BuildJob, BuildOutcome
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.searcher import Proposal
from edgeprune.search.space import Shape
from edgeprune.serialization import write_bytes_atomic
from edgeprune.tasks.base import Task


def build_on_worker(job: BuildJob, task: Task, shared_folder: Path | None) -> BuildOutcome:
    """Runs in a Ray worker: the candidate built, verified and evaluated there (progress off: a worker's lines
    would interleave with the driver's)."""
    task.progress = Progress(enabled=False)
    return job.run(task, shared_folder)


class RayBuildsAhead:
    """Keeps up to `depth` builds of the candidates ranked next running on Ray (the process must be connected).
    `shared_folder`: a folder at the same path on every node (a network file system); the workers write the
    artifacts there and only their qualities travel through the object store."""

    def __init__(self, builder: CandidateBuilder, depth: int, progress: Progress,
                 shared_folder: Path | None = None) -> None:
        import ray

        self.ray = ray
        self.remote = ray.remote(num_cpus=1)(build_on_worker)  # an export keeps one core busy
        self.builder, self.depth, self.progress, self.shared_folder = builder, depth, progress, shared_folder
        self.task = ray.put(portable_copy(builder.task))  # once, not with every job
        self.inflight: dict[tuple[str, Shape], tuple[Any, Path]] = {}
        self.considered: set[tuple[str, Shape]] = set()
        self.proposed: set[tuple[str, Shape]] = set()  # built here: a build ahead of one of these was used
        self.landed: set[tuple[str, Shape]] = set()
        self.started = 0

    def before_build(self, proposal: Proposal, upcoming: list[Proposal]) -> None:
        """Land the build of the candidate about to be built here, if it ran elsewhere; start the next ones."""
        self._land((proposal.recipe, proposal.shape))
        self.considered.add((proposal.recipe, proposal.shape))
        self.proposed.add((proposal.recipe, proposal.shape))
        for candidate in upcoming:
            key = (candidate.recipe, candidate.shape)
            if key in self.considered or len(self.inflight) >= self.depth:
                continue
            self.considered.add(key)
            job = self.builder.build_job(candidate.shape, RECIPES.get(candidate.recipe))
            if job is None:
                continue
            self.inflight[key] = (self.remote.remote(job, self.task, self.shared_folder), job.export.cache_file)
            self.started += 1
            self.progress.note(f"  build of {candidate.recipe}, {candidate.shape.describe()} started ahead on Ray")

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
        write_bytes_atomic(target, data)
        if outcome.validation_quality is not None:
            self.builder.measured_ahead[(outcome.digest, "validation")] = outcome.validation_quality
        self.landed.add(key)

    def close(self) -> str:
        """Cancel what still runs; a line saying what the builds ahead did."""
        for reference, _ in self.inflight.values():
            self.ray.cancel(reference, force=True)
        cancelled = len(self.inflight)
        self.inflight = {}
        used = len(self.landed & self.proposed)
        return (f"candidate builds started ahead on Ray: {self.started} ({used} used here, "
                f"{len(self.landed) - used} not needed by the search, {cancelled} cancelled when it ended)")


def portable_copy(task: Task) -> Task:
    """The task as a worker needs it: its data encoded already (no tokenizer or model folder needed there), and
    without the driver's progress, whose stream is this process's (the worker sets its own)."""
    task.encode("validation")
    portable = copy.copy(task)
    portable.progress = None  # type: ignore[assignment] - set again in build_on_worker
    return portable
