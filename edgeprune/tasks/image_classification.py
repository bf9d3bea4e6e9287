"""Image classification with a vision transformer: top-1 and top-5, per class, through the model's own head
or a linear head fitted on the [CLS] features of the calibration images."""

import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.classifier import ImageClassifier
from edgeprune.serialization import write_json_atomic
from edgeprune.tasks.base import Batch, Quality, Split, Task, Teacher, split_items
from edgeprune.tasks.compatibility import VISION
from edgeprune.tasks.image_preprocessing import ImagePreprocessing, image_processor_for, pixel_values, preprocessing_of
from edgeprune.tasks.metrics import classification_report
from edgeprune.tasks.text import load_model_folder, model_architecture
from edgeprune.tasks.text_classification import HEADS, fit_linear_head

DECODE_CHUNK = 64  # images decoded and processed at a time: bounded memory for the decoded images


@dataclass
class ImageClassificationTask(Task):
    head: str = "auto"

    kind = "image-classification"
    metric = "top1"
    model_kinds = (VISION,)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head not in HEADS:
            raise UserInputError(f"unknown head {self.head!r}; choose from: {', '.join(HEADS)}")

    @cached_property
    def uses_own_head(self) -> bool:
        own = model_architecture(self.model_path).endswith("ForImageClassification")
        if self.head == "model" and not own:
            raise UserInputError(f"the model in {self.model_path} has no image classification head; use --head fit")
        return self.head == "model" or (self.head == "auto" and own)

    @cached_property
    def image_processor(self) -> Any:
        """transformers' image processor of the model folder, checked against the model's channels."""
        return image_processor_for(self.model_path)

    @cached_property
    def preprocessing(self) -> ImagePreprocessing:
        return preprocessing_of(self.image_processor, self.model_path)

    @cached_property
    def labels(self) -> list[str]:
        calibration = {item.label for item in self.splits.calibration}
        if not self.uses_own_head:
            return sorted(calibration)
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.model_path, local_files_only=True)
        names = [str(config.id2label[i]) for i in range(config.num_labels)]
        everything = {item.label for split in ("calibration", "validation", "test")
                      for item in split_items(self, split)}
        if not everything <= set(names):
            raise UserInputError(f"the classification head of {self.model_path} predicts {names}, but the image "
                                 f"folders are named {sorted(everything)}; rename them, or use --head fit")
        return names

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("pixel_values",)

    @cached_property
    def _encoded(self) -> dict[str, Batch]:
        index = {label: i for i, label in enumerate(self.labels)}
        encoded = {}
        for split in ("calibration", "validation", "test"):
            items = split_items(self, split)
            unknown = sorted({item.label for item in items} - set(index))
            if unknown:
                raise UserInputError(f"labels {unknown} appear in the {split} split but not in calibration; add "
                                     "images of them or change the split ratios")
            with self.progress.task(f"decoding the {split} images", len(items)) as bar:
                pixels = []
                for start in range(0, len(items), DECODE_CHUNK):
                    chunk = items[start:start + DECODE_CHUNK]
                    images = [item.load(self.preprocessing.mode) for item in chunk]
                    pixels.append(pixel_values(images, self.image_processor, self.preprocessing,
                                               [item.source for item in chunk]))
                    bar.advance(len(chunk))
            encoded[split] = {"pixel_values": torch.cat(pixels),
                              "labels": torch.tensor([index[item.label] for item in items], dtype=torch.long)}
        return encoded

    def encode(self, split: Split) -> Batch:
        return self._encoded[split]

    def teacher(self) -> Teacher:
        started = time.perf_counter()
        self.encode("calibration")  # data and labels are checked before any model is loaded
        if self.uses_own_head:
            model = ImageClassifier(load_model_folder(self.model_path, "AutoModelForImageClassification")).eval()
        else:
            encoder = load_model_folder(self.model_path, "AutoModel", add_pooling_layer=False)
            features = self._cls_features(encoder)
            classifier = nn.Linear(encoder.config.hidden_size, len(self.labels))
            fit_linear_head(classifier, features, self.encode("calibration")["labels"])
            model = ImageClassifier(encoder, classifier).eval()
        return Teacher(model, self.quality(model, "validation"), self.quality(model, "test"),
                       time.perf_counter() - started, cached=False, labels=self.labels)

    @torch.no_grad()
    def _cls_features(self, encoder: nn.Module, batch_size: int = 32) -> torch.Tensor:
        return torch.cat([encoder(pixel_values=batch["pixel_values"]).last_hidden_state[:, 0]
                          for batch in self.batches("calibration", batch_size)])

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(model(batch["pixel_values"])[0], batch["labels"])

    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        logits = torch.cat([o.reshape(1, -1) for o in outputs])
        report = classification_report(logits, self.encode(split)["labels"][:len(outputs)], self.labels,
                                       top_k=(1, 5))
        top1 = report.pop("accuracy")
        report.pop("top1", None)
        return Quality("top1", top1, True, split, len(outputs), report)

    def ship(self, folder: Path) -> list[str]:
        write_json_atomic(folder / "preprocessing.json", vars(self.preprocessing))
        write_json_atomic(folder / "labels.json", {"labels": self.labels, "output": "logits, one per label"})
        # the processor itself, so that a Python app gets the same pixels from AutoImageProcessor.from_pretrained
        self.image_processor.save_pretrained(folder)
        return ["preprocessing.json", "preprocessor_config.json", "labels.json"]

    def options_key(self) -> str:
        return f"head={self.head}|{self.preprocessing}"

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "labels": self.labels, "preprocessing": vars(self.preprocessing),
                "head": "the model's own" if self.uses_own_head else "linear, fitted on [CLS] calibration features"}
