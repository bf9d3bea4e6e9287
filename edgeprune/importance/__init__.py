"""Head and layer importance criteria behind one interface each, with registries, `score_heads` and `score_layers`."""

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.importance.activation_norm import ActivationNorm
from edgeprune.importance.angular_distance import AngularDistance
from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LayerCriterion, LayerScores, LossFn
from edgeprune.importance.combination import Combination
from edgeprune.importance.defaults import ScoringChoice, default_scoring
from edgeprune.importance.entropy import AttentionEntropy
from edgeprune.importance.fluctuation import Fluctuation
from edgeprune.importance.gate_gradient import GateGradient
from edgeprune.importance.leave_one_out import LeaveOneOut
from edgeprune.importance.taylor import Taylor
from edgeprune.importance.taylor_output_proj import TaylorOutputProjection
from edgeprune.importance.weight_magnitude import WeightMagnitude
from edgeprune.registry import Registry

CRITERIA: Registry[type[HeadCriterion]] = Registry("importance criterion")
for _criterion in (GateGradient, Taylor, TaylorOutputProjection, LeaveOneOut, AttentionEntropy, ActivationNorm,
                   WeightMagnitude, Combination, Fluctuation):
    CRITERIA.register(_criterion.name)(_criterion)

LAYER_CRITERIA: Registry[type[LayerCriterion]] = Registry("layer importance criterion")
LAYER_CRITERIA.register(AngularDistance.name)(AngularDistance)


def classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Cross-entropy of a model that returns logits first (EncoderClassifier, HF classifiers)."""
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = output[0] if isinstance(output, tuple) else output.logits
    return F.cross_entropy(logits, batch["labels"])


def score_heads(
    model: nn.Module,
    batches: Iterable[Batch],
    criterion: str | None = None,
    loss_fn: LossFn | None = None,
    **options: Any,
) -> HeadScores:
    """Score every attention head of `model` on `batches`; higher means more important.

    `criterion`: a CRITERIA name; None is the one `fit` uses for this model (`default_scoring(model)`).
    `options` go to the criterion, e.g. `norm="l1"` for weight-magnitude or `weights={...}` for combination.
    """
    name = criterion if criterion is not None else default_scoring(model).criterion
    return CRITERIA.get(name)(**options).score(model, batches, loss_fn or classification_loss)


def score_layers(
    model: nn.Module,
    batches: Iterable[Batch],
    criterion: str = "angular-distance",
    loss_fn: LossFn | None = None,
    **options: Any,
) -> LayerScores:
    """Score every layer (or, with `block_size=n`, every block of n consecutive layers); higher = more important."""
    return LAYER_CRITERIA.get(criterion)(**options).score(model, batches, loss_fn or classification_loss)


__all__ = [
    "CRITERIA", "LAYER_CRITERIA", "ActivationNorm", "AngularDistance", "AttentionEntropy", "Combination",
    "Fluctuation", "GateGradient", "HeadCriterion", "HeadScores", "LayerCriterion", "LayerScores", "LeaveOneOut",
    "ScoringChoice", "Taylor", "TaylorOutputProjection", "WeightMagnitude", "classification_loss", "default_scoring",
    "score_heads", "score_layers",
]
