"""Bias compensation: a removed head leaves its mean output behind in the output projection's bias.

FLAP (An, Zhao, Yu, Tang and Wang, "Fluctuation-based Adaptive Structured Pruning for Large Language Models",
AAAI 2024) adds, for every removed input channel j of an output projection W, W[:, j]·x̄_j to its bias, with
x̄_j the channel's mean over calibration data. For a head that is the mean of its output (context vector)
projected by its own output-projection columns, W_O^(h) x̄_h: the layer then behaves as if the head were
mean-ablated rather than zero-ablated, so the residual stream keeps its mean and the layer norms downstream
see inputs on the scale they were trained for. One-shot, no training: one label-free forward per batch.

Means are taken over real tokens (the batch's `attention_mask` when it has one), weighted by token, since
the bias is added to every token.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import ModelAdapter, adapter_for, forward_through_layers
from edgeprune.models.base import dense_head_count

Batch = Mapping[str, torch.Tensor]


@dataclass
class HeadOutputMeans:
    """Per layer, each dense head's mean output before the output projection: `means[l]` is
    [dense heads, head size], NaN for heads the model no longer had when they were measured."""

    means: list[np.ndarray]
    num_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"means": [[None if np.isnan(row).any() else [float(v) for v in row] for row in layer]
                          for layer in self.means],
                "num_tokens": self.num_tokens}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HeadOutputMeans":
        means = []
        for layer in data["means"]:
            size = max((len(row) for row in layer if row is not None), default=0)
            means.append(np.array([[np.nan] * size if row is None else row for row in layer], dtype=np.float64))
        return cls(means, int(data["num_tokens"]))


def _model_inputs(batch: Batch) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "labels"}


def measure_head_means(model: nn.Module, batches: Iterable[Batch]) -> HeadOutputMeans:
    """Mean output of every head of `model` (as it is now) over the real tokens of `batches`.

    Each batch is a mapping of keyword inputs to `model` (a `labels` entry is ignored); its `attention_mask`,
    when present and [batch, tokens], marks the real tokens, else every position counts.
    """
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    sums = [torch.zeros(b.num_heads, b.head_size, dtype=torch.float64) for b in blocks]
    counts = [0.0] * len(blocks)
    mask: list[torch.Tensor | None] = [None]

    def accumulate(layer: int, context: torch.Tensor) -> torch.Tensor:
        values = context.detach().double()  # [batch, tokens, heads, head size]
        weights = mask[0]
        if weights is None or tuple(weights.shape) != tuple(values.shape[:2]):
            weights = torch.ones(values.shape[:2], dtype=torch.float64, device=values.device)
        weights = weights.to(device=values.device, dtype=torch.float64)
        sums[layer] += torch.einsum("bt,bthd->hd", weights, values).cpu()
        counts[layer] += float(weights.sum())
        return context

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), adapter.head_output_hook(model, accumulate):
            for batch in batches:
                mask[0] = batch.get("attention_mask")
                forward_through_layers(model, lambda: model(**_model_inputs(batch)))  # noqa: B023 (called at once)
    finally:
        model.train(was_training)
    if not counts or min(counts) == 0:
        raise UserInputError("no data to measure head means on: the batches were empty")
    width = dense_head_count(blocks)
    means = []
    for block, total, count in zip(blocks, sums, counts, strict=True):
        layer = np.full((width, block.head_size), np.nan)
        for position, original in enumerate(block.original_heads):
            layer[original] = (total[position] / count).numpy()
        means.append(layer)
    return HeadOutputMeans(means, int(counts[0]))


def output_bias(adapter: ModelAdapter, model: nn.Module, layer: int) -> torch.Tensor:
    """The output projection's bias of `layer`, created (zero) where the family has none."""
    projection = adapter.output_projection(model, layer)
    if projection.bias is None:
        adapter.add_output_bias(model, layer)
        projection = adapter.output_projection(model, layer)
    return projection.bias


def fold_head_means(adapter: ModelAdapter, model: nn.Module, layer: int, positions: list[int],
                    means: HeadOutputMeans) -> None:
    """Add W_O^(h) x̄_h to `layer`'s output-projection bias for each head h at current `positions`
    (before they are sliced out)."""
    if not positions:
        return
    block = adapter.attention_blocks(model)[layer]
    if layer >= len(means.means):
        raise UserInputError(f"the head means cover {len(means.means)} layers; layer {layer} has none")
    table = means.means[layer]
    dense = [block.original_heads[p] for p in positions]
    vectors = table[dense] if max(dense) < len(table) else np.full((len(dense), block.head_size), np.nan)
    if vectors.shape[-1] != block.head_size or np.isnan(vectors).any():
        raise UserInputError(f"layer {layer}: no measured mean for heads {dense}; measure the head means on the "
                             "model before removing these heads")
    bias = output_bias(adapter, model, layer)
    weight = adapter.output_projection(model, layer).weight
    size = block.head_size
    columns = torch.cat([torch.arange(p * size, (p + 1) * size) for p in positions]).to(weight.device)
    flat = torch.as_tensor(vectors.reshape(-1), dtype=torch.float64, device=weight.device)
    with torch.no_grad():
        bias += (weight.detach().double().index_select(1, columns) @ flat).to(bias.dtype)
