"""Fluctuation: how much a head's contribution to the residual stream varies around its mean.

FLAP (An, Zhao, Yu, Tang and Wang, "Fluctuation-based Adaptive Structured Pruning for Large Language Models",
AAAI 2024) scores each input channel j of an output projection W by the sample variance of its input times the
squared norm of the weight column that reads it, Var(x_j)·‖W[:, j]‖², and sums over a structure's channels.
Paired with bias compensation (`edgeprune.pruning.compensation`), which keeps each removed head's mean, what
removal loses is exactly the fluctuation around that mean.

`form="projected"` scores head h by the expected squared norm of that loss itself,
E‖W_O^(h)(x_h − x̄_h)‖² = tr(W_O^(h)ᵀ W_O^(h) Cov(x_h)), which also counts the covariance between the head's
channels; `form="flap"` keeps FLAP's per-channel sum Σ_j Var(x_j)‖W_O[:, j]‖² (the diagonal of the same
product). x_h is the head's output before the output projection; moments are over real tokens, weighted by
token (population variance). One label-free forward per batch, no backward.

`form="relative"` (default) divides each token's loss by the mean square of the residual stream it is added to (the
layer's input), E_t[‖W_O^(h)(x_t − x̄)‖² / mean(h_t²)]: what the next normalization layer sees of the change.
In a post-LN encoder every layer's input is normalized, so this ranks like "projected"; in a pre-LN decoder the
residual stream grows with depth (and its first token carries a massive activation), so the raw loss is far
larger in late layers and a global ranking by it removes the early layers' heads first. Measured (docs/FINDINGS.md):
on SmolLM2-135M with 60 of 270 heads removed, compensated, held-out perplexity 1.25× dense against 1.62× for
"projected" (benchmarks/criteria_decoder.py); on MiniLM a higher embedding cosine than "projected" at 25, 50 and
75 % of heads removed (benchmarks/criteria.py).
"""

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Literal

import numpy as np
import torch
from torch import nn

from edgeprune.importance import common
from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, require_examples, token_mask
from edgeprune.models import adapter_for

FORMS = ("projected", "flap", "relative")


class Fluctuation(HeadCriterion):
    name = "fluctuation"

    def __init__(self, form: Literal["projected", "flap", "relative"] = "relative") -> None:
        if form not in FORMS:
            raise ValueError(f"form must be one of {', '.join(FORMS)}; got {form!r}")
        self.form = form

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn | None = None) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        first = [torch.zeros(b.num_heads, b.head_size, dtype=torch.float64) for b in blocks]
        second = [torch.zeros(b.num_heads, b.head_size, b.head_size, dtype=torch.float64) for b in blocks]
        tokens = [0.0] * len(blocks)
        relative = self.form == "relative"
        # relative: Σ w_t x_t and Σ w_t, w_t = 1 / mean square of the residual stream at token t (second: Σ w x xᵀ)
        weighted_first = [torch.zeros_like(f) for f in first] if relative else []
        weight_sums = [0.0] * len(blocks)
        residual: dict[int, torch.Tensor] = {}  # layer → [batch, tokens] 1 / mean(h²) of the layer's input
        examples = 0
        mask: torch.Tensor | None = torch.empty(0)

        def accumulate(layer: int, heads: torch.Tensor) -> torch.Tensor:
            values = heads.detach().double()  # [batch, tokens, heads, head size]
            weights = common.weights_like(mask, values)  # float64, as `values`
            first[layer] += torch.einsum("bt,bthd->hd", weights, values).cpu()
            tokens[layer] += float(weights.sum())
            if relative:
                weights = weights * residual_weights(residual.pop(layer), values)
                weighted_first[layer] += torch.einsum("bt,bthd->hd", weights, values).cpu()
                weight_sums[layer] += float(weights.sum())
            second[layer] += torch.einsum("bt,bthd,bthe->hde", weights, values, values).cpu()
            return heads

        with (eval_mode(model), torch.no_grad(), adapter.head_output_hook(model, accumulate),
              layer_inputs(adapter.layer_modules(model), residual) if relative else nullcontext()):
            for batch in batches:
                mask = token_mask(batch)
                common.forward(model, batch)
                examples += batch_size(batch)
        require_examples(examples)
        per_position = np.full((len(blocks), max(b.num_heads for b in blocks)), np.nan)
        for block in blocks:
            mean = first[block.layer] / tokens[block.layer]
            if relative:  # E_w[(x − x̄)(x − x̄)ᵀ] with x̄ the plain mean (what compensation folds in), per token
                spread = (second[block.layer] - torch.einsum("hd,he->hde", mean, weighted_first[block.layer])
                          - torch.einsum("hd,he->hde", weighted_first[block.layer], mean)
                          + weight_sums[block.layer] * torch.einsum("hd,he->hde", mean, mean))
                covariance = spread / tokens[block.layer]
            else:
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


@contextmanager
def layer_inputs(layers: list[nn.Module], into: dict[int, torch.Tensor]) -> Iterator[None]:
    """While open, each layer's forward first stores 1 / mean square of its input hidden states per token
    ([batch, tokens] or as the layer takes them) in `into[layer index]`."""
    def remember(index: int):
        def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            hidden = args[0] if args else next(v for v in kwargs.values() if isinstance(v, torch.Tensor))
            into[index] = hidden.detach().double().pow(2).mean(dim=-1).clamp(min=1e-12).reciprocal()
        return hook

    handles = [layer.register_forward_pre_hook(remember(index), with_kwargs=True)
               for index, layer in enumerate(layers)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def residual_weights(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The layer input's per-token weights laid out as `values` [batch, tokens, ...] (a sequence-first layer's
    input is [tokens, batch])."""
    if weights.shape == values.shape[:2]:
        return weights.to(values.device)
    if weights.shape == values.shape[1::-1]:
        return weights.t().to(values.device)
    raise ValueError(f"the layer's input is laid out {tuple(weights.shape)}, its heads' outputs "
                     f"{tuple(values.shape[:2])}: form='relative' cannot pair them")
