"""A candidate's build as a function of its inputs: what can run in another process or on another machine.

`edgeprune.cluster.ahead.candidate_build_job` packs what building one candidate needs (the pruned float module,
its example and calibration inputs, the recipe, the inputs to verify on, the vocabulary map of a trimmed vocabulary,
and with recovery the student's starting weights and the settings) into a `BuildJob`; `BuildJob.run(task, teacher)`
distils the student when asked (`recovering.run_recovery`, as fit does), quantizes, exports, verifies against
PyTorch and measures the validation quality through the runtime, and returns a `BuildOutcome`: the artifact's
bytes, that quality and the recovered model. Nothing in it refers
to the search, the device or the driver's files, so a Ray worker can run it (`edgeprune.cluster.ahead`) and the
driver takes the outcome as if it had built the candidate itself: the bytes land in the content-keyed export
cache, the quality where the builder looks for runtime qualities.
"""

import copy
import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export import RUNTIMES, ExportJob, content_key, export, load_artifact
from edgeprune.progress import Progress
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.recovery import DistillResult
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import run_recovery
from edgeprune.search.space import Shape
from edgeprune.serialization import write_bytes_atomic
from edgeprune.tasks.base import Quality, Task


@dataclass(frozen=True)
class RecoverySpec:
    """Distil the job's module from the teacher before it is exported, as fit's recovery does."""

    options: FitOptions  # recover_steps, recovery_batch_size
    parent: Shape | None  # the recovered structure the student starts from (None: the pruned teacher)
    threads: int  # torch threads for the distillation: the driver's, so that it computes the same numbers


@dataclass(frozen=True)
class BuildOutcome:
    """What a `BuildJob` gave: the artifact's bytes (None when written to a shared folder, or rejected), their
    sha256, its validation quality through the runtime, or why verification rejected it."""

    file_name: str  # the export cache's name for it
    data: bytes | None = None
    digest: str | None = None
    validation_quality: Quality | None = None
    rejected: str | None = None
    seconds: float = 0.0
    recovered: nn.Module | None = None  # with recovery: the distilled student (full vocabulary)
    distillation: DistillResult | None = None
    recovered_quality: Quality | None = None  # its PyTorch validation quality

    @property
    def usable(self) -> bool:
        return self.rejected is None and self.digest is not None


@dataclass
class BuildJob:
    """Quantize, export, verify and evaluate one candidate; every input travels with the job."""

    export: ExportJob  # the float module (with recovery: the student before it), inputs, recipe, cache file
    verify_on: list[tuple[torch.Tensor, ...]]  # as the artifact takes them (token ids remapped when trimmed)
    vocabulary: VocabularyMap | None  # the trimmed vocabulary's map: the evaluation's inputs go through it
    name: str  # for messages: "candidate (int8)"
    recovery: RecoverySpec | None = None  # distil the module first (its export's cache name is known after)

    def run(self, task: Task, teacher: nn.Module | None = None, shared_folder: Path | None = None) -> BuildOutcome:
        """Build it here. `task` supplies the data and the metric, `teacher` the distillation's targets (with
        recovery). With `shared_folder` (a folder the driver reads too) the bytes are written there, not
        returned. A recipe that fails verification is an outcome (`rejected`), not an error: the driver builds
        such a candidate itself and reports it."""
        started = time.perf_counter()
        job = self.export
        module, recovered, distillation, recovered_quality = job.module, None, None, None
        if self.recovery is not None:
            if teacher is None:
                raise ValueError("a build job with recovery needs the dense teacher")
            torch.set_num_threads(self.recovery.threads)
            recovered = module
            distillation, recovered_quality = run_recovery(recovered, teacher, task, self.recovery.options,
                                                           Progress(enabled=False))
            module = copy.deepcopy(recovered)  # quantization must not touch the recovered weights
            if self.vocabulary is not None:  # recovered at the full vocabulary (the teacher's inputs), trimmed after
                module = trim_vocabulary(module, self.vocabulary)
        file_name = job.cache_file.name if self.recovery is None else (
            f"{content_key(module, job.recipe, job.example_inputs, job.calibration)}"
            f"{RUNTIMES.get(job.recipe.runtime).suffix}")
        with tempfile.TemporaryDirectory(prefix="edgeprune-build-") as folder:
            path = Path(folder) / file_name
            try:
                export(module, job.example_inputs, path, job.recipe, calibration=job.calibration,
                       verify_on=self.verify_on, name=self.name)
            except VerificationError as error:
                return BuildOutcome(file_name, rejected=str(error), seconds=round(time.perf_counter() - started, 2))
            data = path.read_bytes()
            quality = task.runtime_quality(load_artifact(path), "validation", self.input_map())
        digest = hashlib.sha256(data).hexdigest()
        if shared_folder is not None:
            write_bytes_atomic(Path(shared_folder) / file_name, data)
        return BuildOutcome(file_name, None if shared_folder is not None else data, digest, quality,
                            seconds=round(time.perf_counter() - started, 2), recovered=recovered,
                            distillation=distillation, recovered_quality=recovered_quality)

    def input_map(self) -> Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]] | None:
        """The task's inputs as the artifact takes them: token ids through the map of a trimmed vocabulary."""
        vocabulary = self.vocabulary
        if vocabulary is None:
            return None
        return lambda inputs: (vocabulary.apply(inputs[0]), *inputs[1:])
