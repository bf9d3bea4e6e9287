"""Weight magnitude: the L2 (or L1) norm of all the weights a head owns.

Magnitude-based head scores, "the L1 or L2 norm of a head's weight matrices" (head-pruning overview "Attention
Head Pruning", scoring metrics); the structured, per-head form of magnitude pruning (Han, Pool, Tran and Dally,
"Learning both Weights and Connections for Efficient Neural Networks", NeurIPS 2015).

I_h = ‖concat(W_Q^(h), W_K^(h), W_V^(h), W_O^(h), b_Q^(h), b_K^(h), b_V^(h))‖_p, p = 2 (default) or 1, over the
slices `adapter.head_weights` returns. Needs no data: the batches are not read and num_examples is 0.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import to_dense
from edgeprune.models import adapter_for

NORMS = {"l1": 1, "l2": 2}


class WeightMagnitude(HeadCriterion):
    name = "weight-magnitude"

    def __init__(self, norm: str = "l2") -> None:
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {sorted(NORMS)}, got {norm!r}")
        self.norm = norm

    def score(self, model: nn.Module, batches: Iterable[Batch] = (), loss_fn: LossFn | None = None) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        per_position = np.full((len(blocks), max(b.num_heads for b in blocks)), np.nan)
        with torch.no_grad():
            for block in blocks:
                for head in range(block.num_heads):
                    flat = torch.cat([w.reshape(-1) for w in adapter.head_weights(model, block.layer, head)])
                    per_position[block.layer, head] = float(torch.linalg.vector_norm(flat.double(), NORMS[self.norm]))
        return HeadScores(to_dense(blocks, per_position), self.name, 0, extra={"norm": self.norm})
