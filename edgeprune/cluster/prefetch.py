"""Exports started early on Ray: while the driver measures one candidate (evaluates it through the runtime,
verifies, benchmarks, computes PyTorch estimates), the exports of the candidates the search ranks next run as Ray
tasks on the cluster's workers, and their bytes land in the content-keyed export cache. The build that needs one
then finds it cached (and still verifies it here).

The search itself does not change: it builds what it would build without Ray, in the same order, so the results,
the choice and the files are the same; a guess the search later skips costs a worker's time and nothing else.
Before each benchmark the prefetcher waits for its exports to finish, so that an export on this machine never
runs beside a benchmark (one benchmark at a time, on a quiet machine, or the figures are noise).
"""

from pathlib import Path
from typing import Any

from edgeprune.export import ExportJob
from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.searcher import BestFirstSearcher, Proposal
from edgeprune.search.space import Shape
from edgeprune.serialization import write_bytes_atomic


def lower(job: ExportJob) -> bytes:
    """Runs in a Ray worker: the job's artifact bytes."""
    return job.lower()


class ExportPrefetcher:
    """Keeps up to `depth` exports of the candidates ranked next running on Ray (the process must be connected)."""

    def __init__(self, builder: CandidateBuilder, depth: int, progress: Progress) -> None:
        import ray

        self.ray = ray
        self.task = ray.remote(num_cpus=1)(lower)  # an export keeps one core busy
        self.builder, self.depth, self.progress = builder, depth, progress
        self.inflight: dict[tuple[str, Shape], tuple[Any, Path]] = {}
        self.considered: set[tuple[str, Shape]] = set()
        self.started = self.landed = 0

    def before_build(self, searcher: BestFirstSearcher, proposal: Proposal) -> None:
        """Land the export of the candidate about to be built, if it ran elsewhere; start the next ones."""
        self._land((proposal.recipe, proposal.shape))
        for upcoming in searcher.upcoming(self.depth):
            key = (upcoming.recipe, upcoming.shape)
            if key in self.considered or len(self.inflight) >= self.depth:
                continue
            self.considered.add(key)
            job = self.builder.export_job(upcoming.shape, RECIPES.get(upcoming.recipe))
            if job is None:
                continue
            self.inflight[key] = (self.task.remote(job), job.cache_file)
            self.started += 1
            self.progress.note(f"  export of {upcoming.recipe}, {upcoming.shape.describe()} started ahead on Ray")

    def quiet(self) -> None:
        """Wait until no export runs (they land in the cache): called before every benchmark."""
        for key in list(self.inflight):
            self._land(key)

    def _land(self, key: tuple[str, Shape]) -> None:
        """Wait for the export of `key`, if one runs, and write its bytes into the export cache."""
        if key not in self.inflight:
            return
        reference, target = self.inflight.pop(key)
        try:
            data = self.ray.get(reference)
        except Exception as error:  # noqa: BLE001 - the build here redoes it and reports a real failure itself
            self.progress.note(f"  an export started ahead failed ({type(error).__name__}); building it here")
            return
        write_bytes_atomic(target, data)
        self.landed += 1

    def close(self) -> str:
        """Cancel what still runs; a line saying what the prefetch did."""
        for reference, _ in self.inflight.values():
            self.ray.cancel(reference, force=True)
        cancelled = len(self.inflight)
        self.inflight = {}
        return (f"exports started ahead on Ray: {self.started} ({self.landed} landed in the export cache, "
                f"{cancelled} cancelled when the search ended)")
