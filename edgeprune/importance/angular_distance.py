"""Angular distance between a layer's (or block's) input and output hidden states.

Gromov, Tirumala, Shapourian, Glorioso and Russo, "The Unreasonable Ineffectiveness of the Deeper Layers"
(2024): d(x^(ℓ), x^(ℓ+n)) = (1/π) arccos(x^(ℓ) · x^(ℓ+n) / (‖x^(ℓ)‖ ‖x^(ℓ+n)‖)), the angle between
the hidden state entering layer ℓ and the one leaving layer ℓ+n−1. A small distance means the block barely
changes the representation and is a candidate for removal (the overview "Structured Pruning › Why Structures
Can Be Removed" summarizes the finding). Higher = more important, like the head scores.

Gromov et al. measure the last token of a causal LM; for encoders every real (non-padding) token counts: the
distance is averaged over an example's real tokens, then over examples. With `block_size` n, entry ℓ scores
layers ℓ .. ℓ+n−1, for ℓ = 0 .. layers − n. No labels needed.
"""

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.importance import common
from edgeprune.importance.base import Batch, LayerCriterion, LayerScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, masked_example_mean, require_examples, token_mask
from edgeprune.models import adapter_for
from edgeprune.models.base import hooks_removed_after


def _hidden(value: Any) -> torch.Tensor:
    """The hidden states in a layer's output, which is a tensor or a tuple starting with one."""
    return value if isinstance(value, torch.Tensor) else value[0]


def angular_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """arccos(cos(x, y)) / π over the last dimension, in float64 (arccos is steep near cos = 1)."""
    cos = torch.nn.functional.cosine_similarity(x.double(), y.double(), dim=-1, eps=1e-12)
    return torch.arccos(cos.clamp(-1.0, 1.0)) / torch.pi


class AngularDistance(LayerCriterion):
    name = "angular-distance"

    def __init__(self, block_size: int = 1) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.block_size = block_size

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn | None = None) -> LayerScores:
        layers = adapter_for(model).layer_modules(model)
        n = self.block_size
        if n > len(layers):
            raise ValueError(f"block_size {n} exceeds the model's {len(layers)} layers")
        total = np.zeros(len(layers) - n + 1)
        examples = 0
        inputs: dict[int, torch.Tensor] = {}
        outputs: dict[int, torch.Tensor] = {}

        def keep_input(index: int) -> Any:
            def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
                inputs[index] = args[0] if args else kwargs["hidden_states"]
            return hook

        def keep_output(index: int) -> Any:
            def hook(_module: nn.Module, _args: tuple, output: Any) -> None:
                outputs[index] = _hidden(output)
            return hook

        handles = [layer.register_forward_pre_hook(keep_input(i), with_kwargs=True) for i, layer in enumerate(layers)]
        handles += [layer.register_forward_hook(keep_output(i)) for i, layer in enumerate(layers)]
        with hooks_removed_after(handles), eval_mode(model), torch.no_grad():
            for batch in batches:
                inputs.clear()
                outputs.clear()
                common.forward(model, batch)
                mask = token_mask(batch)
                for start in range(len(total)):
                    distance = angular_distance(inputs[start], outputs[start + n - 1])  # [batch, tokens]
                    total[start] += float(masked_example_mean(distance, mask).sum())
                examples += batch_size(batch)
        require_examples(examples)
        return LayerScores(total / examples, self.name, examples, n)
