"""Head importance criteria behind one interface, with a registry and `score_heads`."""

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.gate_gradient import GateGradient
from edgeprune.registry import Registry

CRITERIA: Registry[type[HeadCriterion]] = Registry("importance criterion")
CRITERIA.register(GateGradient.name)(GateGradient)


def classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Cross-entropy of a model that returns logits first (EncoderClassifier, HF classifiers)."""
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = output[0] if isinstance(output, tuple) else output.logits
    return F.cross_entropy(logits, batch["labels"])


def score_heads(
    model: nn.Module,
    batches: Iterable[Batch],
    criterion: str = "gate-gradient",
    loss_fn: LossFn | None = None,
) -> HeadScores:
    """Score every attention head of `model` on `batches`; higher means more important."""
    return CRITERIA.get(criterion)().score(model, batches, loss_fn or classification_loss)


__all__ = ["CRITERIA", "HeadCriterion", "HeadScores", "classification_loss", "score_heads"]
