"""First-order Taylor importance of a head's output, |∂L/∂o_h · o_h|.

Molchanov, Tyree, Karras, Aila and Kautz, "Pruning Convolutional Neural Networks for Resource Efficient
Inference" (ICLR 2017): removing a unit with activation z changes the loss by about |∂L/∂z · z|. Applied to
attention heads with o_h the head's output before the output projection (as in the head-pruning overview
"Multi Head Attention - Learning Module", section "Taylor Expansion Importance": ΔL_h ≈ |∂L/∂o_h · o_h|).

For each example i, t_i(h) = |Σ_tokens Σ_dims ∂ℓ_i/∂o_h ⊙ o_h|, and the importance is the mean of t_i(h) over
the examples. t_i(h) equals |∂ℓ_i/∂ξ_h| for a gate ξ_h = 1 on the head, so this is Michel et al.'s gate gradient
with the absolute value taken per example rather than per batch.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, require_examples, to_dense
from edgeprune.models import adapter_for
from edgeprune.models.base import frozen_parameters


class Taylor(HeadCriterion):
    name = "taylor"

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        total = np.zeros((len(blocks), max(b.num_heads for b in blocks)))
        examples = 0
        captured: dict[int, torch.Tensor] = {}

        def capture(layer: int, heads: torch.Tensor) -> torch.Tensor:
            # parameters are frozen, so the first layer's heads are not part of a graph yet: start one there
            output = heads if heads.requires_grad else heads.detach().requires_grad_(True)
            output.retain_grad()
            captured[layer] = output
            return output

        with eval_mode(model), frozen_parameters(model), adapter.head_output_hook(model, capture):
            for batch in batches:
                captured.clear()
                loss = loss_fn(model, batch)
                loss.backward()
                size = batch_size(batch)
                for layer, heads in captured.items():
                    if heads.grad is None:  # this layer's heads do not reach the loss
                        continue
                    # [batch, tokens, heads, dims] -> [batch, heads]; × size undoes the loss's batch mean
                    per_example = (heads.grad.double() * heads.detach().double()).sum(dim=(1, 3)) * size
                    total[layer, : per_example.shape[1]] += per_example.abs().sum(dim=0).cpu().numpy()
                examples += size
        require_examples(examples)
        return HeadScores(to_dense(blocks, total / examples), self.name, examples)
