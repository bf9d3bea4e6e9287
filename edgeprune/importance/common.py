"""Helpers the criteria share: batch bookkeeping, label-free forwards, mapping to dense head indices."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from edgeprune.importance.base import Batch
from edgeprune.models import forward_through_layers
from edgeprune.models.base import AttentionBlock, dense_head_count


def batch_size(batch: Batch) -> int:
    return int(next(iter(batch.values())).shape[0])


def attention_mask(batch: Batch) -> torch.Tensor:
    """The batch's attention mask, all ones when it has none."""
    mask = batch.get("attention_mask")
    return torch.ones_like(batch["input_ids"]) if mask is None else mask


def token_mask(batch: Batch) -> torch.Tensor | None:
    """[batch, tokens] float mask, 1 for real tokens and 0 for padding; None for a batch without tokens (images:
    every patch position is real, and how many there are is known only inside the model)."""
    if "input_ids" not in batch and "attention_mask" not in batch:
        return None
    return attention_mask(batch).float()


def weights_like(mask: torch.Tensor | None, values: torch.Tensor) -> torch.Tensor:
    """The [batch, tokens] weights for `values` [batch, tokens, ...]: the mask, or all ones when there is none."""
    if mask is None:
        return torch.ones(values.shape[:2], dtype=values.dtype, device=values.device)
    return mask.to(device=values.device, dtype=values.dtype)


def forward(model: nn.Module, batch: Batch) -> None:
    """A label-free forward, with the same call convention as `classification_loss`, run as far as the output of
    the last layer (`forward_through_layers`: what the criteria measure is inside the layers); a batch without
    token ids (an image batch: `pixel_values`) is passed as keywords."""
    if "input_ids" not in batch:
        forward_through_layers(model, lambda: model(**{name: value for name, value in batch.items()
                                                       if name != "labels"}))
    else:
        forward_through_layers(model, lambda: model(input_ids=batch["input_ids"], attention_mask=attention_mask(batch)))


def masked_example_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Per-example mean over real tokens: values [batch, tokens, *rest], mask [batch, tokens] (None: every token
    is real) -> [batch, *rest]."""
    mask = weights_like(mask, values)
    weights = mask.to(values.dtype).reshape(*mask.shape, *([1] * (values.dim() - 2)))
    return (values * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def dense_width(blocks: Sequence[AttentionBlock]) -> int:
    return dense_head_count(list(blocks))


def to_dense(blocks: Sequence[AttentionBlock], per_position: np.ndarray) -> np.ndarray:
    """[layers, current heads] values -> [layers, dense heads], NaN where a head was removed."""
    scores = np.full((len(blocks), dense_width(blocks)), np.nan)
    for block in blocks:
        for position, original in enumerate(block.original_heads):
            scores[block.layer, original] = per_position[block.layer, position]
    return scores


def require_examples(examples: int) -> None:
    if examples == 0:
        raise ValueError("no data to score on: the batches were empty")


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
