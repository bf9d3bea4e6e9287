"""The head-scoring choice `fit` makes for a model, which the step-by-step verbs and API default to as well.

One place decides it, so that `edgeprune score` → `prune` (and `score_heads` → `prune` in Python) build the
model `fit` would build from the same plan. On MiniLM at half the heads removed, fluctuation scores compared raw
across layers, with each removed head's mean output folded into the output-projection bias, keep 94.91 %
accuracy and 0.910 embedding cosine, against 92.51 % and 0.819 with the heads removed outright (docs/FINDINGS.md,
benchmarks/criteria.py).
"""

from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class ScoringChoice:
    criterion: str  # head importance criterion (a CRITERIA name)
    normalize: str  # per-layer normalization of the scores before global selection: "none", "l2" or "zscore"
    compensate: bool  # fold removed heads' (and FFN neurons') mean outputs into the biases (FLAP)


# best one-shot embedding cosine and accuracy at 25–75 % of heads removed on encoders
FLUCTUATION_COMPENSATED = ScoringChoice(criterion="fluctuation", normalize="none", compensate=True)


def default_scoring(model: nn.Module | None = None) -> ScoringChoice:
    """The scoring `fit` uses for `model` (None: fit's default before a model is known).

    Today one choice for every family; a model-dependent choice (fluctuation ranks a decoder's heads worse than
    Taylor: issue 16) goes here, and `FitOptions`, `score_heads`, `prune` and the CLI verbs follow it.
    """
    return FLUCTUATION_COMPENSATED
