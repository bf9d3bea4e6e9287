"""Attention focus: how far a head's attention is from uniform, log(n_keys) − entropy.

Attention entropy per head as in Clark, Khandelwal, Levy and Manning, "What Does BERT Look At? An Analysis of
BERT's Attention" (BlackboxNLP 2019): H = −Σ_j α_j log α_j over the keys for each query. Voita,
Talbot, Moiseev, Sennrich and Titov, "Analyzing Multi-Head Self-Attention" (ACL 2019) find that confident
(peaked) heads are the important ones; the head-pruning overview "Multi Head Attention - Learning Module"
("Attention Pattern Heuristics") gives the same heuristic: low-entropy heads may matter more.

Importance = log(n) − H, with n the example's number of real (non-padding) keys: 0 for uniform attention, up to
log(n) for attention on a single key, so higher = more focused = more important, comparable across lengths.
Averaged over an example's real query tokens, then over examples. Padding is excluded as keys and as queries.
Needs no labels or gradients; the model needs eager attention so the probabilities exist.
"""

from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from edgeprune.importance import common
from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, masked_example_mean, require_examples, token_mask
from edgeprune.models import adapter_for


def attention_focus(probs: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """probs [batch, heads, queries, keys], mask [batch, tokens] (None: every token is real) -> per-example mean
    focus [batch, heads]."""
    probs = probs.double()
    keys = common.weights_like(mask, probs[:, 0])  # [batch, keys]; queries and keys are the same tokens
    entropy = -(torch.special.xlogy(probs, probs) * keys[:, None, None, :]).sum(dim=-1)
    focus = torch.log(keys.sum(dim=1).clamp(min=1))[:, None, None] - entropy  # [batch, heads, queries]
    return masked_example_mean(focus.transpose(1, 2), mask)


class AttentionEntropy(HeadCriterion):
    name = "entropy"

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn | None = None) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        total = np.zeros((len(blocks), max(b.num_heads for b in blocks)))
        examples = 0
        mask: torch.Tensor | None = torch.empty(0)

        def accumulate(layer: int, probs: torch.Tensor) -> None:
            focus = attention_focus(probs.detach(), mask)
            total[layer, : focus.shape[1]] += focus.sum(dim=0).cpu().numpy()

        with eval_mode(model), torch.no_grad(), adapter.attention_probs_hook(model, accumulate):
            for batch in batches:
                mask = token_mask(batch)
                common.forward(model, batch)
                examples += batch_size(batch)
        require_examples(examples)
        return HeadScores(common.to_dense(blocks, total / examples), self.name, examples,
                          extra={"score": "log(n_keys) - entropy"})
