"""Structured removal of FFN (intermediate) neurons in BERT-like layers.

Neuron j of a layer's feed-forward block is row j of `intermediate.dense` (weight and bias) and column j
of `output.dense`; since the activation is element-wise, slicing both removes exactly that neuron's
contribution: the result equals zeroing column j of `output.dense`. Scores: the product of the L2 norms
of the neuron's input row and output column ("weight-norm"), or its mean absolute activation over real
tokens ("activation", the FFN analogue of the activation criteria of Molchanov et al., 2017).
"""

from collections.abc import Iterable
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
NEURON_CRITERIA = ("weight-norm", "activation")


def ffn_layers(model: nn.Module) -> list[tuple[nn.Module, nn.Linear, nn.Linear]]:
    """Per layer (intermediate module, its up projection, the down projection) of a BERT-like model."""
    found = []
    for index, layer in enumerate(adapter_for(model).layer_modules(model)):
        intermediate = getattr(layer, "intermediate", None)
        up = getattr(intermediate, "dense", None)
        down = getattr(getattr(layer, "output", None), "dense", None)
        if not isinstance(up, nn.Linear) or not isinstance(down, nn.Linear):
            raise UserInputError(f"FFN neuron removal supports BERT-like layers (layer.intermediate.dense and "
                                 f"layer.output.dense); layer {index} ({type(layer).__name__}) has no such pair")
        if up.out_features != down.in_features:
            raise UserInputError(f"layer {index}: intermediate.dense has {up.out_features} outputs but "
                                 f"output.dense takes {down.in_features} inputs")
        found.append((intermediate, up, down))
    return found


def intermediate_sizes(model: nn.Module) -> list[int]:
    return [up.out_features for _, up, _ in ffn_layers(model)]


def neuron_parameter_count(model: nn.Module, layer: int) -> int:
    """Parameters one FFN neuron of `layer` owns: its input row and bias, its output column."""
    _, up, down = ffn_layers(model)[layer]
    return up.in_features + (1 if up.bias is not None else 0) + down.out_features


def score_neurons(model: nn.Module, batches: Iterable[Batch] | None = None,
                  criterion: str = "weight-norm") -> list[np.ndarray]:
    """Per layer, one importance score per current FFN neuron (higher = more important)."""
    layers = ffn_layers(model)
    if criterion == "weight-norm":
        return [(up.weight.detach().norm(dim=1) * down.weight.detach().norm(dim=0)).double().numpy()
                for _, up, down in layers]
    if criterion != "activation":
        raise UserInputError(f"unknown neuron criterion {criterion!r}; choose from {', '.join(NEURON_CRITERIA)}")
    if batches is None:
        raise UserInputError("the activation criterion needs batches")
    totals = [torch.zeros(up.out_features, dtype=torch.float64) for _, up, _ in layers]
    count = torch.zeros((), dtype=torch.float64)
    mask_holder: dict[str, torch.Tensor] = {}

    def accumulate(index: int) -> Any:
        def hook(_module: nn.Module, _args: tuple, output: torch.Tensor) -> None:
            mask = mask_holder["mask"].to(output.dtype).unsqueeze(-1)  # activations after the nonlinearity
            totals[index] += (output.abs() * mask).sum(dim=(0, 1)).double()
        return hook

    handles = [intermediate.register_forward_hook(accumulate(i)) for i, (intermediate, _, _) in enumerate(layers)]
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
    return [(total / count).numpy() for total in totals]


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


def remove_neurons(model: nn.Module, remove: dict[int, list[int]]) -> nn.Module:
    """Slice the listed neurons (current positions) out of each layer's FFN, in place; returns `model`.

    The config stays true: `intermediate_size` is the width when every layer has the same one;
    otherwise it is the widest layer's and the per-layer widths are recorded under
    `edgeprune_intermediate_sizes` (like the kept-heads record).
    """
    layers = ffn_layers(model)
    for layer, neurons in remove.items():
        if not 0 <= layer < len(layers):
            raise UserInputError(f"layer {layer} does not exist; the model has layers 0..{len(layers) - 1}")
        _, up, down = layers[layer]
        drop = set(neurons)
        absent = sorted(drop - set(range(up.out_features)))
        if absent:
            raise UserInputError(f"layer {layer} has neurons 0..{up.out_features - 1}; cannot remove {absent}")
        keep = torch.tensor([j for j in range(up.out_features) if j not in drop], dtype=torch.long)
        if len(keep) == 0:
            raise UserInputError(f"layer {layer}: removing all {up.out_features} FFN neurons; keep at least one")
        _slice_rows(up, keep)
        _slice_columns(down, keep)
    _record_sizes(model, [up.out_features for _, up, _ in layers])
    return model


def zero_neurons(model: nn.Module, remove: dict[int, list[int]]) -> nn.Module:
    """Silence the listed neurons without changing shapes (zero their output columns); the reference for tests."""
    layers = ffn_layers(model)
    with torch.no_grad():
        for layer, neurons in remove.items():
            layers[layer][2].weight[:, list(neurons)] = 0
    return model


def _slice_rows(linear: nn.Linear, keep: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight.detach()[keep].clone(), requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach()[keep].clone(), requires_grad=linear.bias.requires_grad)
    linear.out_features = len(keep)


def _slice_columns(linear: nn.Linear, keep: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight.detach()[:, keep].clone(), requires_grad=linear.weight.requires_grad)
    linear.in_features = len(keep)


def _record_sizes(model: nn.Module, sizes: list[int]) -> None:
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
