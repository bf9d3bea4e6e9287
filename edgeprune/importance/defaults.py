"""The head-scoring choice the API makes for a model when no data says otherwise.

`fit` and `edgeprune score` choose by measurement (`criterion="auto"`, `edgeprune.search.scoring`): fluctuation
and Taylor each rank the heads, and the ranking whose pruned model keeps the better validation quality wins, the
default below on a tie. Without a task to measure on (`score_heads` and `prune` in Python), this default applies.
On MiniLM at half the heads removed, fluctuation scores compared raw across layers, with each removed head's mean
output folded into the output-projection bias, keep 94.91 % accuracy and 0.910 embedding cosine, against 92.51 %
and 0.819 with the heads removed outright (docs/FINDINGS.md, benchmarks/criteria.py); fluctuation's default
`relative` form keeps that on encoders and also ranks a pre-LN decoder's heads well (`importance.fluctuation`).
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

    One choice for every family: what differs between models is measured by `criterion="auto"` where a task is
    at hand (`edgeprune.search.scoring.measured_head_scores`), not guessed from the family here.
    """
    return FLUCTUATION_COMPENSATED
