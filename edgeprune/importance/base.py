"""Head importance: the value a criterion produces and the interface criteria implement."""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.serialization import json_codec

Batch = Mapping[str, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
NORMALIZATIONS = ("l2", "zscore", "none")


@json_codec
@dataclass(eq=False)  # the array compares element-wise; __eq__ below compares whole values
class HeadScores:
    """[layers, heads] importance, higher = more important, indexed by the dense model's heads.

    Heads already removed from the model score NaN.
    """

    scores: np.ndarray
    criterion: str
    num_examples: int
    normalized_per_layer: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HeadScores):
            return NotImplemented
        return (np.array_equal(self.scores, other.scores, equal_nan=True)
                and (self.criterion, self.num_examples, self.normalized_per_layer, self.extra)
                == (other.criterion, other.num_examples, other.normalized_per_layer, other.extra))

    def to_dict(self) -> dict[str, Any]:
        return {
            "scores": [[None if np.isnan(v) else float(v) for v in row] for row in self.scores],
            "criterion": self.criterion,
            "num_examples": self.num_examples,
            "normalized_per_layer": self.normalized_per_layer,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HeadScores":
        scores = np.array([[np.nan if v is None else v for v in row] for row in data["scores"]], dtype=np.float64)
        return cls(scores, data["criterion"], data["num_examples"], data.get("normalized_per_layer", False),
                   dict(data.get("extra", {})))

    def normalize_per_layer(self, method: str = "l2") -> "HeadScores":
        """Rescale each layer's scores so that global selection compares heads across layers.

        "l2": divide by the layer's L2 norm (Michel et al., 2019, section 4.2). "zscore": subtract the layer's
        mean and divide by its standard deviation, the standardization FLAP (An et al., AAAI 2024) applies
        before its global selection. "none": unchanged (raw scores compared across layers).
        """
        if method == "none":
            return HeadScores(self.scores.copy(), self.criterion, self.num_examples, False, dict(self.extra))
        if method == "l2":
            norms = np.sqrt(np.nansum(self.scores**2, axis=1, keepdims=True))
            normalized = self.scores / np.where(norms > 0, norms, 1.0)
        elif method == "zscore":
            deviation = np.nanstd(self.scores, axis=1, keepdims=True)
            normalized = (self.scores - np.nanmean(self.scores, axis=1, keepdims=True)) / np.where(
                deviation > 0, deviation, 1.0)
        else:
            raise ValueError(f"per-layer normalization must be one of {', '.join(NORMALIZATIONS)}; got {method!r}")
        return HeadScores(normalized, self.criterion, self.num_examples, True, dict(self.extra))


class HeadCriterion(ABC):
    """Scores each head of a model on data. Subclasses cite the paper they implement."""

    name: str = ""

    @abstractmethod
    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        ...


@dataclass
class LayerScores:
    """Per-layer importance, higher = more important, indexed by the model's current layers.

    With `block_size` n > 1, entry l scores the block of layers l .. l + n - 1, so there are
    layers - n + 1 entries.
    """

    scores: np.ndarray
    criterion: str
    num_examples: int
    block_size: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scores": [None if np.isnan(v) else float(v) for v in self.scores],
            "criterion": self.criterion,
            "num_examples": self.num_examples,
            "block_size": self.block_size,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LayerScores":
        scores = np.array([np.nan if v is None else v for v in data["scores"]], dtype=np.float64)
        return cls(scores, data["criterion"], data["num_examples"], data.get("block_size", 1),
                   dict(data.get("extra", {})))


class LayerCriterion(ABC):
    """Scores each layer (or block of consecutive layers) of a model on data."""

    name: str = ""

    @abstractmethod
    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> LayerScores:
        ...
