"""A candidate's build as a function of its inputs: what can run in another process or on another machine.

`CandidateBuilder.build_job` packs what building one candidate needs (the pruned float module, its example and
calibration inputs, the recipe, the inputs to verify on, the vocabulary map of a trimmed vocabulary) into a
`BuildJob`; `BuildJob.run(task)` quantizes, exports, verifies against PyTorch and measures the validation quality
through the runtime, and returns a `BuildOutcome`: the artifact's bytes and that quality. Nothing in it refers
to the search, the device or the driver's files, so a Ray worker can run it (`edgeprune.cluster.ahead`) and the
driver takes the outcome as if it had built the candidate itself: the bytes land in the content-keyed export
cache, the quality where the builder looks for runtime qualities.
"""

import hashlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from edgeprune.errors import VerificationError
from edgeprune.export import ExportJob, export, load_artifact
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.serialization import write_bytes_atomic
from edgeprune.tasks.base import Quality, Task


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

    @property
    def usable(self) -> bool:
        return self.rejected is None and self.digest is not None


@dataclass
class BuildJob:
    """Quantize, export, verify and evaluate one candidate; every input travels with the job."""

    export: ExportJob  # the float module, example and calibration inputs, recipe, and the export cache's file
    verify_on: list[tuple[torch.Tensor, ...]]  # as the artifact takes them (token ids remapped when trimmed)
    vocabulary: VocabularyMap | None  # the trimmed vocabulary's map: the evaluation's inputs go through it
    name: str  # for messages: "candidate (int8)"

    @property
    def file_name(self) -> str:
        return self.export.cache_file.name

    def run(self, task: Task, shared_folder: Path | None = None) -> BuildOutcome:
        """Build it here. `task` supplies the validation split and its metric. With `shared_folder` (a folder
        the driver reads too) the bytes are written there, not returned. A recipe that fails verification is an
        outcome (`rejected`), not an error: the driver builds such a candidate itself and reports it."""
        started = time.perf_counter()
        job = self.export
        with tempfile.TemporaryDirectory(prefix="edgeprune-build-") as folder:
            path = Path(folder) / self.file_name
            try:
                export(job.module, job.example_inputs, path, job.recipe, calibration=job.calibration,
                       verify_on=self.verify_on, name=self.name)
            except VerificationError as error:
                return BuildOutcome(self.file_name, rejected=str(error),
                                    seconds=round(time.perf_counter() - started, 2))
            data = path.read_bytes()
            quality = task.runtime_quality(load_artifact(path), "validation", self.input_map())
        digest = hashlib.sha256(data).hexdigest()
        if shared_folder is not None:
            write_bytes_atomic(Path(shared_folder) / self.file_name, data)
        return BuildOutcome(self.file_name, None if shared_folder is not None else data, digest, quality,
                            seconds=round(time.perf_counter() - started, 2))

    def input_map(self) -> Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]] | None:
        """The task's inputs as the artifact takes them: token ids through the map of a trimmed vocabulary."""
        vocabulary = self.vocabulary
        if vocabulary is None:
            return None
        return lambda inputs: (vocabulary.apply(inputs[0]), *inputs[1:])
