"""Structured removal of FFN (intermediate) neurons, for every adapter family.

Each adapter lists its layers' feed-forward blocks (`ModelAdapter.feed_forwards`: BERT's intermediate.dense and
output.dense, DistilBERT's ffn.lin1/lin2, ViT's mlp.fc1/fc2, a gated MLP's gate_proj, up_proj and down_proj,
nn.TransformerEncoderLayer's linear1/linear2); nothing here knows a family's attribute names. Neuron j of a block
is row j of each input projection (weight and bias) and column j of the output projection. The nonlinearity (and
the gating product) is element-wise, so slicing those rows and that column removes exactly that neuron's
contribution: the result equals zeroing column j of the output projection. Scores: the product of the L2 norms of
the neuron's input rows and output column ("weight-norm"), or its mean absolute activation (the output
projection's input) over real tokens ("activation", the FFN analogue of the activation criteria of Molchanov et
al., 2017).
"""

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.importance.base import Batch
from edgeprune.importance.common import forward
from edgeprune.models import adapter_for
from edgeprune.models.base import INTERMEDIATE_SIZES_CONFIG_KEY, FeedForward

NEURON_CRITERIA = ("weight-norm", "activation", "fluctuation")

__all__ = ["INTERMEDIATE_SIZES_CONFIG_KEY", "NEURON_CRITERIA", "FeedForward", "NeuronStatistics", "ffn_layers",
           "intermediate_sizes", "neuron_parameter_count", "neuron_statistics", "plan_neurons",
           "record_sizes", "remove_neurons", "score_neurons", "zero_neurons"]


def ffn_layers(model: nn.Module) -> list[FeedForward]:
    """Each layer's feed-forward block, in layer order, as the model's adapter lists them (a one-line
    UserInputError for a family or layer without one)."""
    return adapter_for(model).feed_forwards(model)


def intermediate_sizes(model: nn.Module) -> list[int]:
    return [block.width for block in ffn_layers(model)]


def neuron_parameter_count(model: nn.Module, layer: int) -> int:
    """Parameters one FFN neuron of `layer` owns: its input rows and biases, its output column."""
    block = ffn_layers(model)[layer]
    return sum(linear.in_features + (1 if linear.bias is not None else 0) for linear in block.inputs) + (
        block.output.out_features)


def score_neurons(model: nn.Module, batches: Iterable[Batch] | None = None,
                  criterion: str = "weight-norm") -> list[np.ndarray]:
    """Per layer, one importance score per current FFN neuron (higher = more important)."""
    layers = ffn_layers(model)
    if criterion == "weight-norm":
        scores = []
        for block in layers:
            score = block.output.weight.detach().norm(dim=0).double()
            for linear in block.inputs:
                score = score * linear.weight.detach().norm(dim=1).double()
            scores.append(score.numpy())
        return scores
    if criterion not in NEURON_CRITERIA:
        raise UserInputError(f"unknown neuron criterion {criterion!r}; choose from {', '.join(NEURON_CRITERIA)}")
    if batches is None:
        raise UserInputError(f"the {criterion} criterion needs batches")
    statistics = neuron_statistics(model, batches)
    return statistics.fluctuation if criterion == "fluctuation" else statistics.mean_abs


@dataclass
class NeuronStatistics:
    """Per layer and neuron, over real tokens: the mean activation, the mean |activation|, and the fluctuation
    E‖W_out[:, j](a_j − ā_j)‖² — what removing neuron j loses once its mean is folded into the output bias
    (FLAP, An et al. 2024, applied to FFN channels)."""

    means: list[torch.Tensor]
    mean_abs: list[np.ndarray]
    fluctuation: list[np.ndarray]


def neuron_statistics(model: nn.Module, batches: Iterable[Batch]) -> NeuronStatistics:
    """One label-free pass over `batches` measuring every FFN neuron's activation (the output projection's input).

    A batch with `input_ids` runs as `model(input_ids=..., attention_mask=...)` (the text convention of the head
    criteria); any other runs as `model(**batch)` without its `labels` (`pixel_values`, or a plain module's
    keyword inputs). Its `attention_mask` [batch, tokens], when present, marks the real tokens; else every
    position counts.
    """
    adapter = adapter_for(model)
    layers = adapter.feed_forwards(model)
    sums = [torch.zeros(block.width, dtype=torch.float64) for block in layers]
    abs_sums = [torch.zeros(block.width, dtype=torch.float64) for block in layers]
    squares = [torch.zeros(block.width, dtype=torch.float64) for block in layers]
    counts = [0.0] * len(layers)
    mask: list[torch.Tensor | None] = [None]

    def accumulate(index: int, values: torch.Tensor) -> torch.Tensor:
        activation = values.detach().double()  # after the nonlinearity (and gating)
        weights = mask[0]
        if weights is None or tuple(weights.shape) != tuple(activation.shape[:2]):
            weights = torch.ones(activation.shape[:-1], dtype=torch.float64, device=activation.device)
        weights = weights.to(device=activation.device, dtype=torch.float64).unsqueeze(-1)
        dims = tuple(range(activation.dim() - 1))
        sums[index] += (activation * weights).sum(dim=dims).cpu()
        abs_sums[index] += (activation.abs() * weights).sum(dim=dims).cpu()
        squares[index] += (activation.square() * weights).sum(dim=dims).cpu()
        counts[index] += float(weights.sum())
        return values

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), adapter.feed_forward_hook(model, accumulate):
            for batch in batches:
                mask[0] = batch.get("attention_mask")
                forward(model, batch)
    finally:
        model.train(was_training)
    if not counts or min(counts) == 0:
        raise ValueError("no data to score on: the batches were empty")
    means = [total / count for total, count in zip(sums, counts, strict=True)]
    fluctuation = []
    for block, mean, square, count in zip(layers, means, squares, counts, strict=True):
        variance = (square / count - mean.square()).clamp_min(0)
        fluctuation.append((variance * block.output.weight.detach().double().square().sum(dim=0).cpu()).numpy())
    return NeuronStatistics([m.float() for m in means],
                            [(total / count).numpy() for total, count in zip(abs_sums, counts, strict=True)],
                            fluctuation)


def plan_neurons(scores: list[np.ndarray], fraction: float, per_layer: bool = True,
                 min_per_layer: int = 1, multiple: int = 1) -> dict[int, list[int]]:
    """The lowest-scoring neurons to remove: `fraction` of each layer (equal widths stay equal), or of all
    neurons chosen globally (`per_layer=False`, scores compared across layers as they are: a neuron's fluctuation,
    `neuron_statistics`, is in residual-stream units).

    `multiple`: a layer at least four multiples wide, and a multiple of it, keeps a width on its multiples (a 4-bit
    recipe's groups of 32 input columns must divide the down projection's width, or the recipe stores that linear
    at 8 bits). Per layer, the width nearest to the fraction's; globally, the layer's neurons go in groups of
    `multiple`, lowest scores first, and the groups of least score per neuron go first, whichever layer they are
    in, until the fraction is reached (so a larger fraction removes a superset of a smaller one's neurons); such a
    layer keeps at least one group, another at least `min_per_layer` neurons."""
    if not 0 <= fraction < 1:
        raise UserInputError(f"fraction must be in [0, 1), got {fraction}")
    remove: dict[int, list[int]] = {}
    if per_layer:
        for layer, values in enumerate(scores):
            count = min(int(round(fraction * len(values))), len(values) - min_per_layer)
            if multiple > 1 and len(values) % multiple == 0 and len(values) >= 4 * multiple and count > 0:
                kept = max(multiple, multiple * int(round((len(values) - count) / multiple)))
                count = len(values) - kept
            if count > 0:
                remove[layer] = sorted(int(i) for i in np.argsort(values, kind="stable")[:count])
        return remove
    groups = []  # (score per neuron, layer, members)
    for layer, values in enumerate(scores):
        grouped = multiple > 1 and len(values) % multiple == 0 and len(values) >= 4 * multiple
        size = multiple if grouped else 1
        kept = max(size, -(-min_per_layer // size) * size)  # min_per_layer, rounded up to whole groups
        order = np.argsort(values, kind="stable")
        for start in range(0, len(values) - kept, size):
            members = order[start:start + size]
            groups.append((float(np.mean(values[members])), layer, sorted(int(i) for i in members)))
    wanted = int(round(fraction * sum(len(values) for values in scores)))
    removed = 0
    # a layer's groups rise in score, so the global order takes each layer's groups in its own order
    for _score, layer, members in sorted(groups, key=lambda group: (group[0], group[1])):
        if removed >= wanted:
            break
        remove.setdefault(layer, []).extend(members)
        removed += len(members)
    return {layer: sorted(ids) for layer, ids in sorted(remove.items())}


def remove_neurons(model: nn.Module, remove: dict[int, list[int]],
                   means: list[torch.Tensor] | None = None) -> nn.Module:
    """Slice the listed neurons (current positions) out of each layer's FFN, in place; returns `model`.

    With `means` (per layer, each current neuron's mean activation, from `neuron_statistics`), each removed
    neuron's mean contribution W_out[:, j]·ā_j is folded into the output projection's bias (one is added
    where there was none), so the layer's mean output is unchanged.

    The model stays true about its widths: a module attribute that states one (a gated MLP's
    `intermediate_size`) follows its layer, and the config's width (`intermediate_size`, DistilBERT's
    `hidden_dim`) is the width when every layer has the same one; otherwise it is the widest layer's and the
    per-layer widths are recorded under `edgeprune_intermediate_sizes` (like the kept-heads record).
    """
    layers = ffn_layers(model)
    for layer, neurons in remove.items():
        if not 0 <= layer < len(layers):
            raise UserInputError(f"layer {layer} does not exist; the model has layers 0..{len(layers) - 1}")
        block = layers[layer]
        width = block.width
        drop = set(neurons)
        absent = sorted(drop - set(range(width)))
        if absent:
            raise UserInputError(f"layer {layer} has neurons 0..{width - 1}; cannot remove {absent}")
        if len(drop) >= width:
            raise UserInputError(f"layer {layer}: removing all {width} FFN neurons; keep at least one")
    for layer, neurons in remove.items():
        block = layers[layer]
        drop = set(neurons)
        if means is not None:
            _fold_means(block.output, sorted(drop), means[layer])
        block.record_dense_width(block.dense_width)
        keep = torch.tensor([j for j in range(block.width) if j not in drop], dtype=torch.long)
        for linear in block.inputs:
            _slice_rows(linear, keep)
        _slice_columns(block.output, keep)
        if block.width_attribute is not None:
            setattr(block.owner, block.width_attribute, len(keep))
    record_sizes(model, [block.width for block in layers])
    return model


def _fold_means(output: nn.Linear, removed: list[int], means: torch.Tensor) -> None:
    if means.shape != (output.in_features,):
        raise ValueError(f"neuron means have shape {tuple(means.shape)}; the layer has {output.in_features} neurons")
    with torch.no_grad():
        weight = output.weight
        shift = weight[:, removed] @ means[removed].to(device=weight.device, dtype=weight.dtype)
        if output.bias is None:
            output.bias = nn.Parameter(torch.zeros(output.out_features, dtype=weight.dtype, device=weight.device),
                                       requires_grad=weight.requires_grad)
        output.bias += shift


def zero_neurons(model: nn.Module, remove: dict[int, list[int]]) -> nn.Module:
    """Silence the listed neurons without changing shapes (zero their output columns); the reference for tests."""
    layers = ffn_layers(model)
    with torch.no_grad():
        for layer, neurons in remove.items():
            layers[layer].output.weight[:, list(neurons)] = 0
    return model


def _slice_rows(linear: nn.Linear, keep: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight.detach()[keep].clone(), requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach()[keep].clone(), requires_grad=linear.bias.requires_grad)
    linear.out_features = len(keep)


def _slice_columns(linear: nn.Linear, keep: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight.detach()[:, keep].clone(), requires_grad=linear.weight.requires_grad)
    linear.in_features = len(keep)


def record_sizes(model: nn.Module, sizes: list[int]) -> None:
    """Keep the config true about FFN widths: the family's width attribute (`intermediate_size`, DistilBERT's
    `hidden_dim`), and per-layer widths under `edgeprune_intermediate_sizes` when they differ."""
    adapter_for(model).record_ffn_widths(model, sizes)
