"""Text classification with an encoder, mean pooling and a linear head fitted on dense embeddings."""

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.data import DataSplits, LabeledText, SplitRatios, stratified_split
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.progress import Progress
from edgeprune.serialization import write_bytes_atomic

if TYPE_CHECKING:
    from edgeprune.quantize.vocabulary import VocabularyMap

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models come from local folders; never from a hub

Split = str  # "calibration" | "validation" | "test"


def default_cache_dir() -> Path:
    return Path(os.environ.get("EDGEPRUNE_CACHE", Path.home() / ".cache" / "edgeprune"))


@dataclass
class Teacher:
    model: EncoderClassifier
    labels: list[str]
    validation_accuracy: float
    test_accuracy: float  # dense teacher in PyTorch, on the test split
    build_seconds: float
    cached: bool


@dataclass
class TextClassificationTask:
    name: str
    model_path: Path
    load_documents: Callable[[], list[LabeledText]]
    max_length: int = 128
    seed: int = 0
    ratios: SplitRatios = field(default_factory=SplitRatios)
    cache_dir: Path = field(default_factory=default_cache_dir)
    progress: Progress = field(default_factory=Progress)

    def __post_init__(self) -> None:
        self.model_path = Path(self.model_path)
        if not self.model_path.is_dir() or not (self.model_path / "config.json").is_file():
            raise UserInputError(f"model path {self.model_path} is not a model folder (no config.json found there)")
        if self.max_length < 8:
            raise UserInputError(f"max length must be at least 8 tokens, got {self.max_length}")

    @cached_property
    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model_path)

    @cached_property
    def splits(self) -> DataSplits:
        documents = self.load_documents()
        if not documents:
            raise UserInputError(f"task {self.name}: no documents to learn from")
        return stratified_split(documents, self.ratios, self.seed)

    @cached_property
    def labels(self) -> list[str]:
        return sorted({d.label for d in self.splits.calibration})

    def encode(self, split: Split) -> dict[str, torch.Tensor]:
        return self._encoded[split]

    @cached_property
    def _encoded(self) -> dict[str, dict[str, torch.Tensor]]:
        encoded = {}
        index = {label: i for i, label in enumerate(self.labels)}
        for split, documents in (("calibration", self.splits.calibration), ("validation", self.splits.validation),
                                 ("test", self.splits.test)):
            unknown = sorted({d.label for d in documents} - set(index))
            if unknown:
                raise UserInputError(f"labels {unknown} appear in the {split} split but not in calibration")
            tokens = self.tokenizer([d.text for d in documents], padding="max_length", truncation=True,
                                    max_length=self.max_length, return_tensors="pt")
            encoded[split] = {
                "input_ids": tokens["input_ids"].long(),
                "attention_mask": tokens["attention_mask"].long(),
                "labels": torch.tensor([index[d.label] for d in documents], dtype=torch.long),
            }
        return encoded

    def batches(self, split: Split, batch_size: int, limit: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        data = self.encode(split)
        count = len(data["labels"]) if limit is None else min(limit, len(data["labels"]))
        for start in range(0, count, batch_size):
            yield {k: v[start:min(start + batch_size, count)] for k, v in data.items()}

    def example_inputs(self, split: Split = "validation", count: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Real inputs at batch 1, the shape artifacts are exported with."""
        data = self.encode(split)
        return [(data["input_ids"][i:i + 1], data["attention_mask"][i:i + 1]) for i in range(count)]

    def vocabulary(self) -> "VocabularyMap":
        """Tokens of the calibration and validation splits plus the tokenizer's special tokens."""
        from edgeprune.quantize.vocabulary import vocabulary_from

        seen = torch.cat([self.encode(split)["input_ids"].flatten() for split in ("calibration", "validation")])
        return vocabulary_from(seen, list(self.tokenizer.all_special_ids), self.tokenizer.unk_token_id,
                               len(self.tokenizer))

    def load_encoder(self) -> nn.Module:
        from transformers import AutoConfig, AutoModel

        from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
        from edgeprune.models.io import load

        try:
            if hasattr(AutoConfig.from_pretrained(self.model_path), KEPT_HEADS_CONFIG_KEY):
                encoder = load(self.model_path)  # pruned by edgeprune: per-layer head counts
                if getattr(encoder, "pooler", None) is not None:
                    encoder.pooler = None
            else:
                # no pooler: the task mean-pools, and an unused layer would only inflate counts and files
                encoder = AutoModel.from_pretrained(self.model_path, dtype=torch.float32,
                                                    attn_implementation="eager", add_pooling_layer=False)
        except (OSError, ValueError) as error:
            raise UserInputError(f"cannot load a model from {self.model_path}: {error}") from None
        adapter_for(encoder)  # fail early with the supported families
        return encoder.eval()

    def cache_key(self) -> str:
        digest = hashlib.sha256()
        digest.update((self.model_path / "config.json").read_bytes())
        for file in sorted(self.model_path.glob("*.safetensors")) + sorted(self.model_path.glob("*.bin")):
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}".encode())
            with file.open("rb") as handle:  # first and last MiB identify the weights cheaply
                digest.update(handle.read(1 << 20))
                handle.seek(max(0, stat.st_size - (1 << 20)))
                digest.update(handle.read())
        for split in ("calibration", "validation", "test"):
            for document in getattr(self.splits, split):
                digest.update(f"{split}|{document.label}|{document.text}".encode())
        digest.update(f"{self.max_length}|{self.seed}|{self.ratios}|{self.name}|v1".encode())
        return digest.hexdigest()[:24]

    def teacher(self) -> Teacher:
        """The dense teacher: encoder + a linear head fitted on its calibration embeddings. Cached."""
        started = time.perf_counter()
        encoder = self.load_encoder()
        cache_file = self.cache_dir / "teachers" / f"{self.name}-{self.cache_key()}.pt"
        hidden = encoder.config.hidden_size
        classifier = nn.Linear(hidden, len(self.labels))
        if cache_file.exists():
            saved = torch.load(cache_file)
            classifier.load_state_dict(saved["classifier"])
            model = EncoderClassifier(encoder, classifier).eval()
            self.progress.note(f"teacher loaded from cache {cache_file}")
            return Teacher(model, saved["labels"], saved["validation_accuracy"], saved["test_accuracy"],
                           time.perf_counter() - started, cached=True)
        embeddings = self.embed(encoder, "calibration")
        fit_linear_head(classifier, embeddings, self.encode("calibration")["labels"])
        model = EncoderClassifier(encoder, classifier).eval()
        validation_accuracy = self.accuracy(model, "validation")
        test_accuracy = self.accuracy(model, "test")
        payload = {"classifier": classifier.state_dict(), "labels": self.labels,
                   "validation_accuracy": validation_accuracy, "test_accuracy": test_accuracy}
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(".partial")
        torch.save(payload, tmp)
        write_bytes_atomic(cache_file, tmp.read_bytes())
        tmp.unlink()
        return Teacher(model, self.labels, validation_accuracy, test_accuracy, time.perf_counter() - started,
                       cached=False)

    @torch.no_grad()
    def embed(self, encoder: nn.Module, split: Split, batch_size: int = 32) -> torch.Tensor:
        from edgeprune.models.classifier import mean_pool

        chunks = []
        total = len(self.encode(split)["labels"])
        with self.progress.task(f"embedding the {split} split with the dense encoder", total) as bar:
            for batch in self.batches(split, batch_size):
                hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
                chunks.append(mean_pool(hidden, batch["attention_mask"]))
                bar.advance(len(batch["labels"]))
        return torch.cat(chunks)

    @torch.no_grad()
    def accuracy(self, model: nn.Module, split: Split, batch_size: int = 32) -> float:
        correct = total = 0
        with self.progress.task(f"accuracy of the PyTorch model on the {split} split",
                                len(self.encode(split)["labels"])) as bar:
            for batch in self.batches(split, batch_size):
                logits, _ = model(batch["input_ids"], batch["attention_mask"])
                correct += int((logits.argmax(-1) == batch["labels"]).sum())
                total += len(batch["labels"])
                bar.advance(len(batch["labels"]))
        return correct / total

    def runtime_accuracy(self, run: Callable[..., list[torch.Tensor]], split: Split = "test") -> float:
        """Accuracy of an artifact run by its runtime, one example at a time (its exported shape)."""
        data = self.encode(split)
        count = len(data["labels"])
        correct = 0
        with self.progress.task(f"accuracy through the runtime on the {split} split", count) as bar:
            for i in range(count):
                logits = run(data["input_ids"][i:i + 1], data["attention_mask"][i:i + 1])[0]
                correct += int(int(logits.argmax(-1)[0]) == int(data["labels"][i]))
                bar.advance(1)
        return correct / count

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "model_path": str(self.model_path), "max_length": self.max_length,
                "seed": self.seed, "split_ratios": [self.ratios.calibration, self.ratios.validation, self.ratios.test],
                "split_sizes": self.splits.sizes(), "labels": self.labels}


def fit_linear_head(classifier: nn.Linear, features: torch.Tensor, labels: torch.Tensor,
                    weight_decay: float = 1e-3, steps: int = 100) -> None:
    """Multinomial logistic regression by L-BFGS, full batch (deterministic)."""
    optimizer = torch.optim.LBFGS(classifier.parameters(), lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(classifier(features), labels) + weight_decay * classifier.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)

