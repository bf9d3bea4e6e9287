"""Activation norm: the mean L2 norm of a head's output over real tokens.

The head-pruning overview "Structured Pruning › Head Pruning" (activation norms): I_h = E_x ‖head_h(x)‖_2,
with head_h the head's output before the output projection. That version misses a head whose output the
projection cancels, as the overview notes; so by default (`projected=True`) the norm is taken of what the
head actually adds to the residual stream, W_O^(h) head_h(x) (its output through its own output-projection
columns), in the spirit of the norm-based analysis of Kobayashi, Kuribayashi, Yokoi and Inui, "Attention is
Not Only a Weight: Analyzing Transformers with Vector Norms" (EMNLP 2020). `projected=False` gives the
overview's pre-projection norm.

Per token ‖·‖_2, averaged over an example's real (non-padding) tokens, then over examples. No labels needed.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from edgeprune.importance import common
from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, masked_example_mean, require_examples, token_mask
from edgeprune.models import adapter_for


class ActivationNorm(HeadCriterion):
    name = "activation-norm"

    def __init__(self, projected: bool = True) -> None:
        self.projected = projected

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn | None = None) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        projections = [adapter.output_projection(model, b.layer) for b in blocks]
        total = np.zeros((len(blocks), max(b.num_heads for b in blocks)))
        examples = 0
        mask = torch.empty(0)

        def accumulate(layer: int, heads: torch.Tensor) -> torch.Tensor:
            values = heads.detach()  # [batch, tokens, heads, head size]
            if self.projected:
                weight = projections[layer].weight.detach()
                per_head = weight.unflatten(1, (values.shape[2], values.shape[3]))  # [hidden, heads, head size]
                values = torch.einsum("bthd,ohd->btho", values, per_head.to(values.dtype))
            norms = torch.linalg.vector_norm(values.double(), dim=-1)  # [batch, tokens, heads]
            total[layer, : norms.shape[2]] += masked_example_mean(norms, mask).sum(dim=0).cpu().numpy()
            return heads

        with eval_mode(model), torch.no_grad(), adapter.head_output_hook(model, accumulate):
            for batch in batches:
                mask = token_mask(batch)
                common.forward(model, batch)
                examples += batch_size(batch)
        require_examples(examples)
        return HeadScores(common.to_dense(blocks, total / examples), self.name, examples,
                          extra={"projected": self.projected})
