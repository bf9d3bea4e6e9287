"""A weighted combination of normalized criteria, Σ_c w_c · normalize(I_c).

Combining importance signals: the head-pruning overview "Multi Head Attention - Learning Module" ("Combining
Multiple Signals") normalizes each signal and takes a weighted sum, as ensembles are more robust to the quirks
of any one criterion.

Normalizations (each component separately, before weighting):
- "layer-l2" (default): each layer's row divided by its L2 norm, as Michel, Levy and Neubig (NeurIPS 2019,
  section 4.2) normalize per layer; matches how the fit pipeline normalizes scores.
- "minmax": (I − min) / (max − min) over all heads of the model, into [0, 1]; keeps comparisons across layers.

The default weights put the loss-aware Taylor estimate first and add the label-free attention focus.
"""

from collections.abc import Iterable, Mapping

import numpy as np
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn

DEFAULT_WEIGHTS = {"taylor": 0.75, "entropy": 0.25}
NORMALIZATIONS = ("layer-l2", "minmax")


def normalize(scores: HeadScores, method: str) -> np.ndarray:
    if method == "layer-l2":
        return scores.normalize_per_layer().scores
    if method == "minmax":
        low, high = np.nanmin(scores.scores), np.nanmax(scores.scores)
        return (scores.scores - low) / (high - low) if high > low else np.where(np.isnan(scores.scores), np.nan, 0.0)
    raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {method!r}")


class Combination(HeadCriterion):
    name = "combination"

    def __init__(self, weights: Mapping[str, float] | None = None, normalization: str = "layer-l2") -> None:
        from edgeprune.importance import CRITERIA  # the registry imports this module

        self.weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
        if not self.weights:
            raise ValueError("a combination needs at least one criterion")
        for name, weight in self.weights.items():
            if name == self.name or name not in CRITERIA:
                raise ValueError(f"cannot combine {name!r}; choose from {[c for c in CRITERIA if c != self.name]}")
            if not np.isfinite(weight):
                raise ValueError(f"weight of {name!r} must be finite, got {weight}")
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        self.normalization = normalization
        self._criteria = {name: CRITERIA.get(name)() for name in self.weights}

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        batches = list(batches)  # every component reads them
        components = {name: criterion.score(model, batches, loss_fn) for name, criterion in self._criteria.items()}
        combined = sum(self.weights[name] * normalize(scores, self.normalization)
                       for name, scores in components.items())
        return HeadScores(np.asarray(combined, dtype=np.float64), self.name,
                          max(s.num_examples for s in components.values()),
                          extra={"weights": self.weights, "normalization": self.normalization,
                                 "components": {name: s.to_dict() for name, s in components.items()}})
