"""Taylor importance of a head's output-projection weights, ‖∂L/∂W_O^(h) ⊙ W_O^(h)‖_F.

Group Taylor criterion of Molchanov, Mallya, Tyree, Frosio and Kautz, "Importance Estimation for Neural Network
Pruning" (CVPR 2019), on the parameters a head owns in the output projection, in the Frobenius-norm form of
the head-pruning overview "Structured Pruning › Head Pruning": I_h = ‖∂L/∂W_O^(h) ⊙ W_O^(h)‖_F, where W_O^(h)
are the output-projection columns that read head h.

L is the mean loss over all scoring examples: per-batch gradients are accumulated (weighted by batch size)
before the product with the weights, so opposite-signed batch gradients cancel as they do in L's gradient.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, require_examples, to_dense
from edgeprune.models import adapter_for
from edgeprune.models.base import frozen_parameters


class TaylorOutputProjection(HeadCriterion):
    name = "taylor-output-proj"

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        weights = [adapter.output_projection(model, b.layer).weight for b in blocks]
        sums = [torch.zeros_like(w, dtype=torch.float64) for w in weights]
        saved_grads = [w.grad for w in weights]
        examples = 0
        with eval_mode(model), frozen_parameters(model):
            try:
                for w in weights:
                    w.requires_grad_(True)
                    w.grad = None
                for batch in batches:
                    loss = loss_fn(model, batch)
                    loss.backward()
                    size = batch_size(batch)
                    for w, acc in zip(weights, sums, strict=True):
                        if w.grad is not None:
                            acc += w.grad.double() * size
                            w.grad = None
                    examples += size
            finally:
                for w, grad in zip(weights, saved_grads, strict=True):
                    w.grad = grad
        require_examples(examples)
        per_position = np.full((len(blocks), max(b.num_heads for b in blocks)), np.nan)
        for block, w, acc in zip(blocks, weights, sums, strict=True):
            product = (acc / examples) * w.detach().double()
            for head in range(block.num_heads):
                columns = product[:, head * block.head_size:(head + 1) * block.head_size]
                per_position[block.layer, head] = float(torch.linalg.matrix_norm(columns))
        return HeadScores(to_dense(blocks, per_position), self.name, examples)
