"""Sentence embeddings: quality is closeness to the dense teacher's embeddings and agreement of nearest neighbours.

Plain encoders are mean-pooled; sentence-transformers folders follow their `modules.json` (the Pooling
module's mode and a Normalize module when present).
"""

import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.classifier import EncoderEmbedder
from edgeprune.tasks.base import Batch, Quality, Split, Teacher, example_count, split_items
from edgeprune.tasks.compatibility import ENCODER
from edgeprune.tasks.metrics import neighbour_agreement
from edgeprune.tasks.text import TextTask

CONTRASTIVE_TEMPERATURE = 0.05  # sharp enough that each embedding must single out its own teacher embedding
NEIGHBOURS = 5


@dataclass(frozen=True)
class PoolingConfig:
    mode: str = "mean"
    normalize: bool = False
    source: str = "default (mean pooling)"


def sentence_transformers_pooling(folder: Path) -> PoolingConfig:
    """Pooling and normalization from a sentence-transformers folder; mean pooling for plain encoders."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return PoolingConfig()
    try:
        modules = json.loads(modules_file.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UserInputError(f"{modules_file} is not valid JSON: {error}") from None
    mode, normalize = "mean", False
    for module in modules:
        kind = str(module.get("type", ""))
        if kind.endswith("Pooling"):
            config_file = folder / str(module.get("path", "")) / "config.json"
            try:
                config = json.loads(config_file.read_text())
            except (OSError, json.JSONDecodeError) as error:
                raise UserInputError(f"cannot read the pooling config {config_file}: {error}") from None
            modes = [m for m, key in (("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                                      ("max", "pooling_mode_max_tokens")) if config.get(key)]
            if len(modes) != 1:
                raise UserInputError(f"{config_file}: edgeprune supports exactly one of cls, mean or max pooling, "
                                     f"found {modes or 'none'}")
            mode = modes[0]
        elif kind.endswith("Normalize"):
            normalize = True
        elif not kind.endswith("Transformer"):
            raise UserInputError(f"{modules_file}: module {kind!r} is not supported; edgeprune runs Transformer, "
                                 "Pooling and Normalize modules")
    return PoolingConfig(mode, normalize, f"sentence-transformers {modules_file.name}")


@dataclass
class EmbeddingTask(TextTask):
    kind = "embedding"
    metric = "cosine"
    model_kinds = (ENCODER,)
    labelled: ClassVar[bool] = False

    @cached_property
    def pooling(self) -> PoolingConfig:
        return sentence_transformers_pooling(self.model_path)

    @cached_property
    def _teacher(self) -> Teacher:
        started = time.perf_counter()
        encoder = self.load_transformer("AutoModel", add_pooling_layer=False)
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None
        model = EncoderEmbedder(encoder, self.pooling.mode, self.pooling.normalize).eval()
        self._reference = {split: self._embed(model, split) for split in ("calibration", "validation", "test")}
        # the teacher is the reference: its quality is computed from its own embeddings, with no second pass
        validation, test = (self.quality_from_outputs(list(self._reference[split]), split)
                            for split in ("validation", "test"))
        return Teacher(model, validation, test, time.perf_counter() - started, cached=False)

    def teacher(self) -> Teacher:
        return self._teacher

    @cached_property
    def _encoded(self) -> dict[str, Batch]:
        return {split: self.tokenize([item.text for item in split_items(self, split)])
                for split in ("calibration", "validation", "test")}

    def encode(self, split: Split) -> Batch:
        return self._encoded[split]

    def reference(self, split: Split) -> torch.Tensor:
        """The dense teacher's embeddings of `split`."""
        self.teacher()
        return self._reference[split]

    @torch.no_grad()
    def _embed(self, model: nn.Module, split: Split, batch_size: int = 32) -> torch.Tensor:
        chunks = []
        with self.progress.task(f"embedding the {split} split with the dense model", example_count(self, split)) as bar:
            for batch in TextTask.batches(self, split, batch_size):  # no teacher embeddings: they come from here
                chunks.append(model(batch["input_ids"], batch["attention_mask"])[0])
                bar.advance(len(batch["input_ids"]))
        return torch.cat(chunks)

    def batches(self, split: Split, batch_size: int, limit: int | None = None):  # noqa: ANN201 - batch iterator
        """Batches carry the teacher's embeddings ("teacher_embedding") for the loss."""
        reference = self.reference(split)
        start = 0
        for batch in super().batches(split, batch_size, limit):
            size = len(batch["input_ids"])
            yield {**batch, "teacher_embedding": reference[start:start + size]}
            start += size

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """In-batch contrastive loss: each embedding must pick out its own teacher embedding among the batch's.

        Unlike a distance to the teacher, it is not at a minimum for the dense model, so gradients score heads.
        """
        embedding = model(batch["input_ids"], batch["attention_mask"])[0]
        logits = F.normalize(embedding, dim=-1) @ F.normalize(batch["teacher_embedding"], dim=-1).T
        return F.cross_entropy(logits / CONTRASTIVE_TEMPERATURE, torch.arange(len(embedding)))

    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        embeddings = torch.cat([o.reshape(1, -1) for o in outputs]).float()
        reference = self._reference[split][:len(outputs)]
        cosines = F.cosine_similarity(embeddings, reference, dim=-1)
        details = {"min_cosine": float(cosines.min()), f"neighbour_agreement_at_{NEIGHBOURS}":
                   neighbour_agreement(embeddings, reference, NEIGHBOURS), "pooling": self.pooling.mode,
                   "normalized": self.pooling.normalize}
        return Quality("cosine", float(cosines.mean()), True, split, len(outputs), details)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "pooling": vars(self.pooling)}
