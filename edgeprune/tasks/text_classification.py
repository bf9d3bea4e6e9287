"""Text classification: the model's own classification head, or an encoder with mean pooling and a linear head
fitted on the dense embeddings of the calibration split."""

import io
import pickle
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.cache import discard, read_entry, write_entry
from edgeprune.errors import UserInputError
from edgeprune.models.classifier import EncoderClassifier, SequenceClassifier
from edgeprune.serialization import write_json_atomic
from edgeprune.tasks.base import Batch, Quality, RuntimeRun, Split, Teacher, example_count, split_items
from edgeprune.tasks.compatibility import DECODER, ENCODER, check_model_for_task
from edgeprune.tasks.metrics import classification_report
from edgeprune.tasks.text import TextTask, load_model_folder, model_architecture

HEADS = ("auto", "model", "fit")  # auto: the model's own head when it has one, else a fitted linear head


@dataclass
class TextClassificationTask(TextTask):
    head: str = "auto"

    kind = "classification"
    metric = "accuracy"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head not in HEADS:
            raise UserInputError(f"unknown head {self.head!r}; choose from: {', '.join(HEADS)}")
        if self.head == "model" and not self.has_own_head:
            raise UserInputError(f"the model in {self.model_path} has no classification head "
                                 f"({model_architecture(self.model_path) or 'no architecture'}); use --head fit")

    def check_model(self) -> None:
        """A text encoder; a decoder only through its own sequence-classification head (it has no pooling)."""
        own = self.head != "fit" and self.has_own_head
        check_model_for_task(self.kind, self.model_path, (ENCODER, DECODER) if own else (ENCODER,),
                             "" if own else ", or a decoder with its own sequence-classification head")

    @cached_property
    def has_own_head(self) -> bool:
        return model_architecture(self.model_path).endswith("ForSequenceClassification")

    @property
    def uses_own_head(self) -> bool:
        return self.head == "model" or (self.head == "auto" and self.has_own_head)

    @cached_property
    def labels(self) -> list[str]:
        calibration = {item.label for item in self.splits.calibration}
        if self.uses_own_head:
            return self._model_labels(calibration)
        return sorted(calibration)

    def _model_labels(self, data_labels: set[str]) -> list[str]:
        """The head's label names in output order, checked against the labels of the data."""
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.model_path, local_files_only=True)
        names = [str(config.id2label[i]) for i in range(config.num_labels)]
        everything = data_labels | {item.label for split in ("validation", "test") for item in split_items(self, split)}
        if everything <= set(names):
            return names
        if everything <= {str(i) for i in range(len(names))}:  # integer labels name the head's outputs
            return [str(i) for i in range(len(names))]
        raise UserInputError(
            f"the classification head of {self.model_path} predicts {names}, but the data has labels "
            f"{sorted(everything)}; rename the labels to match, or use --head fit to fit a new head on the encoder")

    @cached_property
    def _encoded(self) -> dict[str, Batch]:
        encoded = {}
        index = {label: i for i, label in enumerate(self.labels)}
        for split in ("calibration", "validation", "test"):
            items = split_items(self, split)
            unknown = sorted({item.label for item in items} - set(index))
            if unknown:
                raise UserInputError(f"labels {unknown} appear in the {split} split but not in calibration; add "
                                     "examples of them or change the split ratios")
            batch = self.tokenize([item.text for item in items])
            batch["labels"] = torch.tensor([index[item.label] for item in items], dtype=torch.long)
            encoded[split] = batch
        return encoded

    def encode(self, split: Split) -> Batch:
        return self._encoded[split]

    def load_encoder(self) -> nn.Module:
        encoder = self.load_transformer("AutoModel", add_pooling_layer=False)
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None  # the task mean-pools; an unused layer would only inflate counts and files
        return encoder

    def teacher(self) -> Teacher:
        """The dense teacher: the model's own head, or encoder + a linear head fitted on calibration embeddings."""
        started = time.perf_counter()
        self.encode("calibration")  # data and labels are checked before any model is loaded
        if self.uses_own_head:
            model = SequenceClassifier(load_model_folder(self.model_path, "AutoModelForSequenceClassification"))
            return Teacher(model, self.quality(model, "validation"), self.quality(model, "test"),
                           time.perf_counter() - started, cached=False, labels=self.labels)
        encoder = self.load_encoder()
        cache_file = self.cache_dir / "teachers" / f"{self.name}-{self.cache_key()}.pt"
        classifier = nn.Linear(encoder.config.hidden_size, len(self.labels))
        saved = self.cached_head(cache_file, classifier)
        if saved is not None:
            model = EncoderClassifier(encoder, classifier).eval()
            self.progress.note(f"teacher loaded from cache {cache_file}")
            validation, test, labels = saved
            return Teacher(model, validation, test, time.perf_counter() - started, cached=True, labels=labels)
        embeddings = self.embed(encoder, "calibration")
        fit_linear_head(classifier, embeddings, self.encode("calibration")["labels"])
        model = EncoderClassifier(encoder, classifier).eval()
        validation, test = self.quality(model, "validation"), self.quality(model, "test")
        buffer = io.BytesIO()
        torch.save({"classifier": classifier.state_dict(), "labels": self.labels, "validation": vars(validation),
                    "test": vars(test)}, buffer)
        write_entry(cache_file, buffer.getvalue(), ("torch",))
        return Teacher(model, validation, test, time.perf_counter() - started, cached=False, labels=self.labels)

    def cached_head(self, cache_file: Path, classifier: nn.Linear) -> tuple[Quality, Quality, list[str]] | None:
        """The head fitted before, loaded into `classifier`, with its validation and test quality and labels, from
        the teacher cache; None when it holds none, or a damaged one (removed, with one warning: built again)."""
        data = read_entry(cache_file, self.progress.warn)
        if data is None:
            return None
        try:
            saved = torch.load(io.BytesIO(data))
            classifier.load_state_dict(saved["classifier"])
            return Quality(**saved["validation"]), Quality(**saved["test"]), list(saved["labels"])
        except (RuntimeError, ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as error:
            discard(cache_file, f"torch cannot load it: {type(error).__name__}", self.progress.warn)
            return None

    @torch.no_grad()
    def embed(self, encoder: nn.Module, split: Split, batch_size: int = 32) -> torch.Tensor:
        from edgeprune.models.classifier import mean_pool

        chunks = []
        title = f"embedding the {split} split with the dense encoder"
        with self.progress.task(title, example_count(self, split)) as bar:
            for batch in self.batches(split, batch_size):
                hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
                chunks.append(mean_pool(hidden, batch["attention_mask"]))
                bar.advance(len(batch["labels"]))
        return torch.cat(chunks)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        logits = output[0] if isinstance(output, tuple | list) else output.logits
        return F.cross_entropy(logits, batch["labels"])

    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        logits = torch.cat([o.reshape(1, -1) for o in outputs])
        report = classification_report(logits, self.encode(split)["labels"][:len(outputs)], self.labels)
        return Quality("accuracy", report.pop("accuracy"), True, split, len(outputs), report)

    @torch.no_grad()
    def accuracy(self, model: nn.Module, split: Split, batch_size: int = 32) -> float:
        correct = 0
        for batch in self.batches(split, batch_size):
            output = model(batch["input_ids"], batch["attention_mask"])
            logits = output[0] if isinstance(output, tuple | list) else output.logits
            correct += int((logits.argmax(-1) == batch["labels"]).sum())
        return correct / example_count(self, split)

    def runtime_accuracy(self, run: RuntimeRun, split: Split = "test") -> float:
        return self.runtime_quality(run, split).value

    def ship(self, folder) -> list[str]:  # noqa: ANN001 - a Path
        written = super().ship(folder)
        write_json_atomic(folder / "labels.json", {"labels": self.labels, "output": "logits, one per label"})
        return [*written, "labels.json"]

    def options_key(self) -> str:
        return f"{super().options_key()}|head={self.head}"

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "labels": self.labels,
                "head": "the model's own" if self.uses_own_head else "linear, fitted on mean-pooled calibration "
                "embeddings"}


def fit_linear_head(classifier: nn.Linear, features: torch.Tensor, labels: torch.Tensor,
                    weight_decay: float = 1e-3, steps: int = 100) -> None:
    """Multinomial logistic regression by L-BFGS, full batch, from zero weights.

    The loss is convex, so a converged fit reaches the same minimum (the same predictions) wherever it starts; on a
    random or weak encoder L-BFGS may stop before convergence, and starting from zeros rather than `nn.Linear`'s
    random initialisation keeps the teacher (and every figure measured against it) the same from run to run.
    """
    with torch.no_grad():
        classifier.weight.zero_()
        classifier.bias.zero_()
    optimizer = torch.optim.LBFGS(classifier.parameters(), lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(classifier(features), labels) + weight_decay * classifier.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
