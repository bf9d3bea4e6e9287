"""Fluctuation: how much a head's contribution to the residual stream varies around its mean.

FLAP (An, Zhao, Yu, Tang and Wang, "Fluctuation-based Adaptive Structured Pruning for Large Language Models",
AAAI 2024) scores each input channel j of an output projection W by the sample variance of its input times the
squared norm of the weight column that reads it, Var(x_j)·‖W[:, j]‖², and sums over a structure's channels.
Paired with bias compensation (`edgeprune.pruning.compensation`), which keeps each removed head's mean, what
removal loses is exactly the fluctuation around that mean.

`form="projected"` (default) scores head h by the expected squared norm of that loss itself,
E‖W_O^(h)(x_h − x̄_h)‖² = tr(W_O^(h)ᵀ W_O^(h) Cov(x_h)), which also counts the covariance between the head's
channels; `form="flap"` keeps FLAP's per-channel sum Σ_j Var(x_j)‖W_O[:, j]‖² (the diagonal of the same
product). x_h is the head's output before the output projection; moments are over real tokens, weighted by
token (population variance). One label-free forward per batch, no backward.
"""

from collections.abc import Iterable
from typing import Literal

import numpy as np
import torch
from torch import nn

from edgeprune.importance import common
from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, require_examples, token_mask
from edgeprune.models import adapter_for

FORMS = ("projected", "flap")


class Fluctuation(HeadCriterion):
    name = "fluctuation"

    def __init__(self, form: Literal["projected", "flap"] = "projected") -> None:
        if form not in FORMS:
            raise ValueError(f"form must be one of {', '.join(FORMS)}; got {form!r}")
        self.form = form

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn | None = None) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        first = [torch.zeros(b.num_heads, b.head_size, dtype=torch.float64) for b in blocks]
        second = [torch.zeros(b.num_heads, b.head_size, b.head_size, dtype=torch.float64) for b in blocks]
        tokens = [0.0] * len(blocks)
        examples = 0
        mask: torch.Tensor | None = torch.empty(0)

        def accumulate(layer: int, heads: torch.Tensor) -> torch.Tensor:
            values = heads.detach().double()  # [batch, tokens, heads, head size]
            weights = common.weights_like(mask, values)  # float64, as `values`
            first[layer] += torch.einsum("bt,bthd->hd", weights, values).cpu()
            second[layer] += torch.einsum("bt,bthd,bthe->hde", weights, values, values).cpu()
            tokens[layer] += float(weights.sum())
            return heads

        with eval_mode(model), torch.no_grad(), adapter.head_output_hook(model, accumulate):
            for batch in batches:
                mask = token_mask(batch)
                common.forward(model, batch)
                examples += batch_size(batch)
        require_examples(examples)
        per_position = np.full((len(blocks), max(b.num_heads for b in blocks)), np.nan)
        for block in blocks:
            mean = first[block.layer] / tokens[block.layer]
            covariance = second[block.layer] / tokens[block.layer] - torch.einsum("hd,he->hde", mean, mean)
            weight = adapter.output_projection(model, block.layer).weight.detach().double().cpu()
            per_head = weight.unflatten(1, (block.num_heads, block.head_size))  # [hidden, heads, head size]
            gram = torch.einsum("ohd,ohe->hde", per_head, per_head)  # W_O^(h)ᵀ W_O^(h)
            if self.form == "flap":
                values = torch.einsum("hdd,hdd->h", gram, covariance)  # Σ_j ‖W[:, j]‖² Var(x_j)
            else:
                values = torch.einsum("hde,hde->h", gram, covariance)  # tr(Wᵀ W Cov), both symmetric
            per_position[block.layer, : block.num_heads] = values.numpy()
        return HeadScores(common.to_dense(blocks, per_position), self.name, examples, extra={"form": self.form})
