"""What every task gives the pipeline: data splits, a loss for scoring and distillation, a quality metric.

A task owns what quality means for a model (accuracy, cosine to the teacher, perplexity, top-1) and how a
model is fed (its inputs at batch 1 for export). The pipeline stages (score, prune, recover, export,
verify, evaluate, fit) only talk to this interface, so a team's own model and data plug in unchanged.
"""

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
from torch import nn

from edgeprune.cache import cache_root
from edgeprune.data import DataSplits, SplitRatios
from edgeprune.errors import UserInputError
from edgeprune.progress import Progress
from edgeprune.tasks.compatibility import check_model_for_task, check_weight_files

if TYPE_CHECKING:
    from edgeprune.quantize.vocabulary import VocabularyMap

Split = str  # "calibration" | "validation" | "test"
SPLITS: tuple[Split, ...] = ("calibration", "validation", "test")
Batch = dict[str, torch.Tensor]
RuntimeRun = Callable[..., list[torch.Tensor]]  # an artifact run by its runtime: inputs in, outputs out


def default_cache_dir() -> Path:
    """The cache folder (`edgeprune.cache.cache_root`): $EDGEPRUNE_CACHE, else ~/.cache/edgeprune."""
    return cache_root()


@dataclass
class Quality:
    """One measurement of a model's quality on one split, with the details a report shows."""

    metric: str  # e.g. "accuracy", "cosine", "perplexity", "top1"
    value: float
    higher_is_better: bool = True
    split: str = "test"
    examples: int = 0
    details: dict[str, Any] = field(default_factory=dict)  # macro-F1, per-class errors, confusion matrix, ...

    def better_or_equal(self, other: "Quality") -> bool:
        return self.value >= other.value if self.higher_is_better else self.value <= other.value


@dataclass
class Teacher:
    """The dense model the task measures against, with its quality in PyTorch."""

    model: nn.Module
    validation: Quality
    test: Quality
    build_seconds: float
    cached: bool
    labels: list[str] = field(default_factory=list)

    @property
    def test_accuracy(self) -> float:
        return self.test.value

    @property
    def validation_accuracy(self) -> float:
        return self.validation.value


@dataclass(frozen=True)
class InputSpec:
    """One input of the exported artifact, for the app that feeds it."""

    name: str
    shape: list[int]
    dtype: str


class QualityTally(Protocol):
    """Quality accumulated over a split as a model's outputs come, batch by batch, in the split's order."""

    def add(self, outputs: torch.Tensor, batch: Batch) -> None:
        """The first output of a batch of examples (batch first) and the batch it was computed from."""

    def quality(self) -> Quality: ...


class OutputsTally:
    """Keeps every example's output for `Task.quality_from_outputs`: the tally of a task whose metric needs the
    whole split at once (accuracy with a confusion matrix, neighbours among embeddings)."""

    def __init__(self, task: "Task", split: Split) -> None:
        self.task, self.split, self.outputs = task, split, []

    def add(self, outputs: torch.Tensor, batch: Batch) -> None:
        examples = int(next(iter(batch.values())).shape[0])
        # one example's output is kept as the model or runtime returned it, a batch's split into examples
        self.outputs.extend([outputs] if examples == 1 else outputs.split(1))

    def quality(self) -> Quality:
        return self.task.quality_from_outputs(self.outputs, self.split)


@dataclass
class Task(ABC):
    """A model folder and data, split once (seeded); subclasses say how to feed and judge the model."""

    name: str
    model_path: Path
    load_items: Callable[[], list]  # LabeledText / LabeledImage records
    seed: int = 0
    ratios: SplitRatios = field(default_factory=SplitRatios)
    cache_dir: Path = field(default_factory=default_cache_dir)
    progress: Progress = field(default_factory=Progress)
    data_description: dict[str, Any] = field(default_factory=dict)  # where the data came from, for the recipe

    kind = "task"  # registry key
    metric = "quality"
    higher_is_better = True
    model_kinds: ClassVar[tuple[str, ...]] = ()  # compatibility.ENCODER, DECODER, VISION: the models it runs
    # how fit recovers a pruned model of this task (`edgeprune.search.recovering`): examples (blocks) a step, the
    # DistillConfig fields its models distil with where they differ from the defaults, and the validation examples
    # a validation pass reads (None: the whole split)
    recovery_batch_size: ClassVar[int] = 16
    recovery_settings: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    recovery_validation_limit: ClassVar[int | None] = None
    labelled: ClassVar[bool] = True  # whether its examples carry labels (then its splits are stratified by them)
    # how `quality`, `batched_quality` and `runtime_quality` accumulate outputs into a Quality: a task whose outputs
    # are large and reduce example by example (a decoder's vocabulary-wide logits) keeps none of them
    quality_tally: ClassVar[Callable[["Task", Split], QualityTally]] = OutputsTally
    quality_batch_size: ClassVar[int] = 32  # examples a forward of `batched_quality` (fit's PyTorch estimates) takes

    def __post_init__(self) -> None:
        self.model_path = Path(self.model_path)
        if not self.model_path.is_dir() or not (self.model_path / "config.json").is_file():
            raise UserInputError(f"model path {self.model_path} is not a model folder (no config.json found there); "
                                 "pass a Hugging Face model folder")
        check_weight_files(self.model_path)
        self.check_model()

    def check_model(self) -> None:
        """Refuse a model of a kind this task cannot run (from its config alone: no weights load)."""
        if self.model_kinds:
            check_model_for_task(self.kind, self.model_path, self.model_kinds)

    # --- data -----------------------------------------------------------------------------------
    @cached_property
    def splits(self) -> DataSplits:
        from edgeprune.data import random_split, stratified_split

        items = self.load_items()
        if not items:
            raise UserInputError(f"task {self.name}: the data holds no examples")
        if not self.labelled:
            return random_split(items, self.ratios, self.seed)
        return stratified_split(items, self.ratios, self.seed)  # refuses labels missing from calibration

    @abstractmethod
    def encode(self, split: Split) -> Batch:
        """The whole split as tensors; the first dimension indexes examples."""

    def recovery_examples(self) -> Batch:
        """What recovery trains on: the calibration split, unless the task keeps more of its calibration text for
        training than it scores on."""
        return self.encode("calibration")

    def batches(self, split: Split, batch_size: int, limit: int | None = None) -> Iterator[Batch]:
        data = self.encode(split)
        total = example_count(self, split) if limit is None else min(limit, example_count(self, split))
        for start in range(0, total, batch_size):
            yield {k: v[start:min(start + batch_size, total)] for k, v in data.items()}

    @property
    @abstractmethod
    def input_names(self) -> tuple[str, ...]:
        """The artifact's inputs, in call order; each is a key of `encode`'s batches."""

    def example_inputs(self, split: Split = "validation", count: int = 1) -> list[tuple[torch.Tensor, ...]]:
        """Real inputs at batch 1, the shape artifacts are exported with."""
        data = self.encode(split)
        available = example_count(self, split)
        if available == 0:
            raise UserInputError(f"task {self.name}: the {split} split is empty; add data or change the split ratios")
        return [tuple(data[name][i:i + 1] for name in self.input_names) for i in range(min(count, available))]

    @property
    def artifact_input_names(self) -> tuple[str, ...]:
        """The artifact's inputs in call order: `input_names`, unless it takes more (a generator's positions)."""
        return self.input_names

    def vocabulary(self) -> "VocabularyMap | None":
        """Token ids the calibration and validation data use (text tasks); None where it does not apply."""
        return None

    # --- model and quality --------------------------------------------------------------------
    @abstractmethod
    def teacher(self) -> Teacher:
        """The dense model as the artifact will run it, and its quality in PyTorch."""

    def dense_model(self) -> nn.Module:
        """The dense model as the artifact will run it, where its quality is not needed (score with a named
        criterion, export, quantize). A task whose teacher measures quality it can skip overrides this."""
        return self.teacher().model

    @abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The loss used for gradient-based head scoring (higher = worse)."""

    @abstractmethod
    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        """Quality from the first output of every example of `split`, in order, one tensor per example."""

    @torch.no_grad()
    def quality(self, model: nn.Module, split: Split = "test") -> Quality:
        """Quality of a PyTorch model (batch 1, the artifact's calling convention)."""
        tally = self.quality_tally(self, split)
        was_training = model.training
        model.eval()
        try:
            title = f"{self.metric} of the PyTorch model on the {split} split"
            for inputs in examples_with_progress(self, title, split):
                tally.add(_first(model(*inputs)), dict(zip(self.input_names, inputs, strict=True)))
        finally:
            model.train(was_training)
        return tally.quality()

    def runtime_quality(self, run: RuntimeRun, split: Split = "test",
                        map_inputs: Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]] | None = None
                        ) -> Quality:
        """Quality of an artifact run by its runtime, one example at a time (its exported shape)."""
        tally = self.quality_tally(self, split)
        for inputs in examples_with_progress(self, f"{self.metric} through the runtime on the {split} split", split):
            tally.add(_first(run(*(map_inputs(inputs) if map_inputs else inputs))),
                      dict(zip(self.input_names, inputs, strict=True)))
        return tally.quality()

    # --- record -------------------------------------------------------------------------------
    def ship(self, folder: Path) -> list[str]:
        """Write what an app needs next to the artifact (tokenizer, preprocessing, labels); return file names."""
        return []

    def describe(self) -> dict[str, Any]:
        from edgeprune.data import describe_split

        return {"name": self.name, "kind": self.kind, "model_path": str(self.model_path), "metric": self.metric,
                "seed": self.seed, "split_ratios": [self.ratios.calibration, self.ratios.validation, self.ratios.test],
                "split_sizes": self.splits.sizes(), "split": describe_split(self.splits), "data": self.data_description}

    def cache_key(self) -> str:
        """Identifies model weights, data split and options, for the teacher and export caches."""
        digest = hashlib.sha256()
        digest.update((self.model_path / "config.json").read_bytes())
        for file in sorted(self.model_path.glob("*.safetensors")) + sorted(self.model_path.glob("*.bin")):
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}".encode())
            with file.open("rb") as handle:  # first and last MiB identify the weights cheaply
                digest.update(handle.read(1 << 20))
                handle.seek(max(0, stat.st_size - (1 << 20)))
                digest.update(handle.read())
        for split in SPLITS:
            for item in split_items(self, split):
                digest.update(f"{split}|{item}".encode())
        digest.update(f"{self.kind}|{self.options_key()}|{self.seed}|{self.ratios}|{self.name}|v2".encode())
        return digest.hexdigest()[:24]

    def options_key(self) -> str:
        return ""


# Helpers computed from a task's interface: functions, so that the interface stays what a task kind implements.
def check_inputs(task: Task) -> None:
    """Everything that can be checked before the model loads: the data, its split and labels, and what turns it
    into tensors (tokenizer, image decoding). Bad input fails here with one line, exit 2."""
    for split in SPLITS:
        task.encode(split)


def example_count(task: Task, split: Split) -> int:
    """How many examples (a decoder's blocks) `split` holds once encoded."""
    return int(next(iter(task.encode(split).values())).shape[0])


def split_items(task: Task, split: Split) -> list:
    """The records (LabeledText, LabeledImage, ...) of one split, in the split's order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    return list(getattr(task.splits, split))


def input_batches(task: Task, split: Split, batch_size: int, limit: int | None = None) -> list[Batch]:
    """`task.batches` holding only the model's inputs (no labels): what a forward pass without the task takes,
    e.g. to measure head means or layer distances."""
    return [{name: batch[name] for name in task.input_names} for batch in task.batches(split, batch_size, limit)]


def input_signature(task: Task) -> list[InputSpec]:
    """The artifact's inputs: names, shapes at batch 1 and dtypes."""
    example = task.example_inputs("validation", 1)[0]
    return [InputSpec(name, list(tensor.shape), str(tensor.dtype).removeprefix("torch."))
            for name, tensor in zip(task.artifact_input_names, example, strict=True)]


def examples_with_progress(task: Task, title: str, split: Split) -> Iterator[tuple[torch.Tensor, ...]]:
    """The inputs of every example of `split` at batch 1, in order, advancing a progress bar titled `title`."""
    data = task.encode(split)
    total = example_count(task, split)
    with task.progress.task(title, total) as bar:
        for i in range(total):
            yield tuple(data[name][i:i + 1] for name in task.input_names)
            bar.advance(1)


@torch.no_grad()
def batched_quality(task: Task, model: nn.Module, split: Split = "validation",
                    batch_size: int | None = None) -> Quality:
    """`task.quality` computed in batches (by default `task.quality_batch_size`): the same figure up to float
    rounding (inputs keep their exported shape, padding masked), several times faster; what fit's PyTorch estimates
    use."""
    batch_size = batch_size or task.quality_batch_size
    tally = task.quality_tally(task, split)
    was_training = model.training
    model.eval()
    try:
        for batch in task.batches(split, batch_size):
            tally.add(_first(model(*(batch[name] for name in task.input_names))), batch)
    finally:
        model.train(was_training)
    return tally.quality()


def _first(outputs: Any) -> torch.Tensor:
    if isinstance(outputs, torch.Tensor):
        return outputs.detach()
    if isinstance(outputs, list | tuple):
        return outputs[0].detach()
    logits = getattr(outputs, "logits", None)
    if logits is None:
        raise TypeError(f"cannot find the first output in {type(outputs).__name__}")
    return logits.detach()
