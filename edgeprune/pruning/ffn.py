"""Structured removal of FFN (intermediate) neurons: BERT-like layers and gated MLPs (Llama, Qwen2, SmolLM2).

Neuron j of a layer's feed-forward block is row j of each input projection (`intermediate.dense` in BERT;
`gate_proj` and `up_proj` in a gated MLP, weight and bias) and column j of the output projection
(`output.dense`, `down_proj`). The nonlinearity (and the gating product) is element-wise, so slicing those
rows and that column removes exactly that neuron's contribution: the result equals zeroing column j of the
output projection. Scores: the product of the L2 norms of the neuron's input rows and output column
("weight-norm"), or its mean absolute activation (the output projection's input) over real tokens
("activation", the FFN analogue of the activation criteria of Molchanov et al., 2017).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.importance.base import Batch
from edgeprune.models import adapter_for
from edgeprune.models.base import find_config, hooks_removed_after

# config attribute holding each layer's FFN width when they differ (saved in config.json)
INTERMEDIATE_SIZES_CONFIG_KEY = "edgeprune_intermediate_sizes"
NEURON_CRITERIA = ("weight-norm", "activation", "fluctuation")


@dataclass(frozen=True)
class FeedForward:
    """One layer's feed-forward block: neuron j is row j of every input projection and column j of the output."""

    inputs: tuple[nn.Linear, ...]  # (intermediate.dense,) or (gate_proj, up_proj)
    output: nn.Linear  # output.dense or down_proj
    owner: nn.Module  # the module holding them (a gated MLP keeps its width in `intermediate_size`)

    @property
    def width(self) -> int:
        return self.output.in_features


def _feed_forward(layer: nn.Module) -> FeedForward | None:
    mlp = getattr(layer, "mlp", None)
    gated = [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if all(isinstance(linear, nn.Linear) for linear in gated):
        return FeedForward((gated[0], gated[1]), gated[2], mlp)
    intermediate = getattr(layer, "intermediate", None)
    up = getattr(intermediate, "dense", None)
    down = getattr(getattr(layer, "output", None), "dense", None)
    if isinstance(up, nn.Linear) and isinstance(down, nn.Linear):
        return FeedForward((up,), down, intermediate)
    return None


def ffn_layers(model: nn.Module) -> list[FeedForward]:
    """Each layer's feed-forward block, in layer order."""
    found = []
    for index, layer in enumerate(adapter_for(model).layer_modules(model)):
        block = _feed_forward(layer)
        if block is None:
            raise UserInputError(f"FFN neuron removal supports BERT-like layers (layer.intermediate.dense and "
                                 f"layer.output.dense) and gated MLPs (mlp.gate_proj, up_proj, down_proj); "
                                 f"layer {index} ({type(layer).__name__}) has neither")
        for linear in block.inputs:
            if linear.out_features != block.output.in_features:
                raise UserInputError(f"layer {index}: an FFN input projection has {linear.out_features} outputs but "
                                     f"the output projection takes {block.output.in_features} inputs")
        found.append(block)
    return found


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
    """One label-free pass over `batches` measuring every FFN neuron's activation (the output projection's input)."""
    layers = ffn_layers(model)
    sums = [torch.zeros(block.width, dtype=torch.float64) for block in layers]
    abs_sums = [torch.zeros(block.width, dtype=torch.float64) for block in layers]
    squares = [torch.zeros(block.width, dtype=torch.float64) for block in layers]
    count = torch.zeros((), dtype=torch.float64)
    mask_holder: dict[str, torch.Tensor] = {}

    def accumulate(index: int) -> Any:
        def hook(_module: nn.Module, args: tuple) -> None:
            activation = args[0].double()  # after the nonlinearity (and gating)
            mask = mask_holder["mask"].to(activation.dtype).unsqueeze(-1)
            sums[index] += (activation * mask).sum(dim=(0, 1))
            abs_sums[index] += (activation.abs() * mask).sum(dim=(0, 1))
            squares[index] += (activation.square() * mask).sum(dim=(0, 1))
        return hook

    handles = [block.output.register_forward_pre_hook(accumulate(i)) for i, block in enumerate(layers)]
    was_training = model.training
    model.eval()
    try:
        with hooks_removed_after(handles), torch.no_grad():
            for batch in batches:
                mask = batch.get("attention_mask")
                mask_holder["mask"] = torch.ones_like(batch["input_ids"]) if mask is None else mask
                model(input_ids=batch["input_ids"], attention_mask=mask_holder["mask"])
                count += mask_holder["mask"].sum()
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("no data to score on: the batches were empty")
    means = [total / count for total in sums]
    fluctuation = []
    for block, mean, square in zip(layers, means, squares, strict=True):
        variance = (square / count - mean.square()).clamp_min(0)
        fluctuation.append((variance * block.output.weight.detach().double().square().sum(dim=0)).numpy())
    return NeuronStatistics([m.float() for m in means], [(t / count).numpy() for t in abs_sums], fluctuation)


def plan_neurons(scores: list[np.ndarray], fraction: float, per_layer: bool = True,
                 min_per_layer: int = 1) -> dict[int, list[int]]:
    """The lowest-scoring neurons to remove: `fraction` of each layer (equal widths stay equal), or of all
    neurons chosen globally (`per_layer=False`, scores compared across layers as they are)."""
    if not 0 <= fraction < 1:
        raise UserInputError(f"fraction must be in [0, 1), got {fraction}")
    remove: dict[int, list[int]] = {}
    if per_layer:
        for layer, values in enumerate(scores):
            count = min(int(round(fraction * len(values))), len(values) - min_per_layer)
            if count > 0:
                remove[layer] = sorted(int(i) for i in np.argsort(values, kind="stable")[:count])
        return remove
    flat = sorted((float(v), layer, i) for layer, values in enumerate(scores) for i, v in enumerate(values))
    budget = int(round(fraction * len(flat)))
    left = [len(values) for values in scores]
    for _value, layer, i in flat:
        if budget == 0:
            break
        if left[layer] > min_per_layer:
            remove.setdefault(layer, []).append(i)
            left[layer] -= 1
            budget -= 1
    return {layer: sorted(ids) for layer, ids in sorted(remove.items())}


def remove_neurons(model: nn.Module, remove: dict[int, list[int]],
                   means: list[torch.Tensor] | None = None) -> nn.Module:
    """Slice the listed neurons (current positions) out of each layer's FFN, in place; returns `model`.

    With `means` (per layer, each current neuron's mean activation, from `neuron_statistics`), each removed
    neuron's mean contribution W_out[:, j]·ā_j is folded into the output projection's bias (one is added
    where there was none), so the layer's mean output is unchanged.

    The config stays true: `intermediate_size` is the width when every layer has the same one;
    otherwise it is the widest layer's and the per-layer widths are recorded under
    `edgeprune_intermediate_sizes` (like the kept-heads record).
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
        keep = torch.tensor([j for j in range(block.width) if j not in drop], dtype=torch.long)
        for linear in block.inputs:
            _slice_rows(linear, keep)
        _slice_columns(block.output, keep)
        if isinstance(getattr(block.owner, "intermediate_size", None), int):
            block.owner.intermediate_size = len(keep)
    record_sizes(model, [block.width for block in layers])
    return model


def _fold_means(output: nn.Linear, removed: list[int], means: torch.Tensor) -> None:
    if means.shape != (output.in_features,):
        raise ValueError(f"neuron means have shape {tuple(means.shape)}; the layer has {output.in_features} neurons")
    with torch.no_grad():
        shift = output.weight[:, removed] @ means[removed].to(output.weight.dtype)
        if output.bias is None:
            output.bias = nn.Parameter(torch.zeros(output.out_features, dtype=output.weight.dtype))
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
    """Keep the config true about FFN widths: `intermediate_size`, and per-layer widths when they differ."""
    config = find_config(model)
    if config is None:
        return
    if len(set(sizes)) == 1:
        config.intermediate_size = sizes[0]
        if hasattr(config, INTERMEDIATE_SIZES_CONFIG_KEY):
            delattr(config, INTERMEDIATE_SIZES_CONFIG_KEY)
    else:
        config.intermediate_size = max(sizes)
        setattr(config, INTERMEDIATE_SIZES_CONFIG_KEY, list(sizes))
