"""Gate gradient |∂L/∂ξ_h|.

Michel, Levy and Neubig, "Are Sixteen Heads Really Better than One?" (NeurIPS 2019), eq. 2:
each head's output is multiplied by a gate ξ_h = 1, and the importance of h is the expected
absolute derivative of the loss with respect to ξ_h over the data.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.models import adapter_for
from edgeprune.models.base import dense_head_count, frozen_parameters


class GateGradient(HeadCriterion):
    name = "gate-gradient"

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        width = dense_head_count(blocks)
        current_width = max(b.num_heads for b in blocks)
        gates = torch.ones(len(blocks), current_width, requires_grad=True)
        total = torch.zeros(len(blocks), current_width, dtype=torch.float64)
        examples = 0
        was_training = model.training
        model.eval()
        try:
            with frozen_parameters(model), adapter.gate_heads(model, gates):
                for batch in batches:
                    gates.grad = None
                    loss = loss_fn(model, batch)
                    loss.backward()
                    size = int(next(iter(batch.values())).shape[0])
                    # the loss is a batch mean; |grad| × batch size keeps batches of unequal size comparable
                    total += gates.grad.detach().abs().double() * size
                    examples += size
        finally:
            model.train(was_training)
        if examples == 0:
            raise ValueError("no data to score heads on: the batches were empty")
        scores = np.full((len(blocks), width), np.nan)
        mean = (total / examples).numpy()
        for block in blocks:
            for position, original in enumerate(block.original_heads):
                scores[block.layer, original] = mean[block.layer, position]
        return HeadScores(scores, self.name, examples)
