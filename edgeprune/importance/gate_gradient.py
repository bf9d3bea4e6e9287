"""Gate gradient |∂L/∂ξ_h|.

Michel, Levy and Neubig, "Are Sixteen Heads Really Better than One?" (NeurIPS 2019), eq. 2:
each head's output is multiplied by a gate ξ_h = 1, and the importance of h is the expected
absolute derivative of the loss with respect to ξ_h over the data (here per batch, as in the paper's
code; "taylor" takes the absolute value per example instead).
"""

from collections.abc import Iterable

import torch
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import eval_mode, require_examples, to_dense
from edgeprune.models import adapter_for
from edgeprune.models.base import frozen_parameters


class GateGradient(HeadCriterion):
    name = "gate-gradient"

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        gates = torch.ones(len(blocks), max(b.num_heads for b in blocks), requires_grad=True)
        total = torch.zeros(gates.shape, dtype=torch.float64)
        examples = 0
        with eval_mode(model), frozen_parameters(model), adapter.gate_heads(model, gates):
            for batch in batches:
                gates.grad = None
                loss_fn(model, batch).backward()
                size = int(next(iter(batch.values())).shape[0])
                # the loss is a batch mean; |grad| × batch size keeps batches of unequal size comparable
                total += gates.grad.detach().abs().double() * size
                examples += size
        require_examples(examples)
        return HeadScores(to_dense(blocks, (total / examples).numpy()), self.name, examples)
