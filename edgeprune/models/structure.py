"""The shape of a pruned model as a plain record, and how to cut a fresh dense model to it.

`structure_of(model)` reads, through the model's adapter, which dense heads each layer keeps, which layers
of each stack remain, each layer's FFN width (now and in the dense model) and which projections gained a bias
(bias compensation).
`restore_structure(model, structure)` cuts a freshly built, unpruned model of the same architecture to that
shape, so the pruned weights then load strictly. `edgeprune.save` writes the record, `edgeprune.load`
applies it; it does not depend on transformers, so plain `nn.Module`s (nn.MultiheadAttention) round-trip too.
"""

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.base import NoFeedForwardError, dense_head_count, kept_layer_record, record_kept_layers


@dataclass(frozen=True)
class LayerStack:
    """One nn.ModuleList of layers: where it is, how many layers it had, which of them remain."""

    path: str  # dotted path from the saved module
    dense: int
    kept: list[int]


@dataclass(frozen=True)
class Structure:
    family: str  # the adapter family the record was read with
    dense_heads: list[int]  # per current layer, its query heads in the dense model
    kept_heads: list[list[int]]  # per current layer, the dense indices of the heads that remain
    stacks: list[LayerStack] = field(default_factory=list)
    ffn_widths: list[int] | None = None  # per current layer; None where the model has no feed-forward blocks
    output_bias: list[int] = field(default_factory=list)  # layers whose attention output projection has a bias
    ffn_output_bias: list[int] = field(default_factory=list)  # layers whose FFN output projection has a bias
    ffn_dense_widths: list[int] | None = None  # per current layer, its FFN width in the dense model (None: unknown)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "dense_heads": self.dense_heads, "kept_heads": self.kept_heads,
                "stacks": [{"path": s.path, "dense": s.dense, "kept": s.kept} for s in self.stacks],
                "ffn_widths": self.ffn_widths, "output_bias": self.output_bias,
                "ffn_output_bias": self.ffn_output_bias, "ffn_dense_widths": self.ffn_dense_widths}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> "Structure":
        try:
            widths, dense_widths = data.get("ffn_widths"), data.get("ffn_dense_widths")
            return cls(str(data["family"]), [int(n) for n in data["dense_heads"]],
                       [[int(h) for h in kept] for kept in data["kept_heads"]],
                       [LayerStack(str(s["path"]), int(s["dense"]), [int(p) for p in s["kept"]])
                        for s in data.get("stacks", [])],
                       None if widths is None else [int(w) for w in widths],
                       [int(i) for i in data.get("output_bias", [])],
                       [int(i) for i in data.get("ffn_output_bias", [])],
                       None if dense_widths is None else [int(w) for w in dense_widths])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UserInputError(f"{source}: the structure record is malformed ({type(error).__name__}: "
                                 f"{error})") from None


def structure_of(model: nn.Module) -> Structure:
    """The record of `model`'s current shape (dense or pruned), relative to its dense architecture."""
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    fallback = dense_head_count(blocks) if blocks else 0
    layers = adapter.layer_modules(model)
    stacks = []
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and any(any(m is layer for layer in layers) for m in module):
            dense, kept = kept_layer_record(module)
            stacks.append(LayerStack(path, dense, kept))
    try:
        ffn = adapter.feed_forwards(model)
    except NoFeedForwardError:  # e.g. attention modules outside any encoder layer
        ffn = None
    return Structure(
        family=adapter.family,
        dense_heads=[b.dense_heads or fallback for b in blocks],
        kept_heads=[list(b.original_heads) for b in blocks],
        stacks=stacks,
        ffn_widths=None if ffn is None else [block.width for block in ffn],
        output_bias=[b.layer for b in blocks if adapter.output_projection(model, b.layer).bias is not None],
        ffn_output_bias=[] if ffn is None else [i for i, block in enumerate(ffn) if block.output.bias is not None],
        ffn_dense_widths=None if ffn is None else [block.dense_width for block in ffn],
    )


def restore_structure(model: nn.Module, structure: Structure, source: str = "the saved model") -> nn.Module:
    """Cut `model` (freshly built, unpruned) in place to `structure`; returns it. Its weights are not meaningful
    afterwards (the saved ones load next). A module that cannot take the shape is a one-line UserInputError."""
    from edgeprune.pruning import PruningPlan, apply_plan

    adapter = adapter_for(model)
    if adapter.family != structure.family:
        raise UserInputError(f"{source} is a {structure.family} model but the given module ({type(model).__name__}) "
                             f"is a {adapter.family} model")
    for stack in structure.stacks:
        _cut_stack(model, stack, source)
    blocks = adapter.attention_blocks(model)
    if len(blocks) != len(structure.kept_heads):
        raise UserInputError(f"{source} has {len(structure.kept_heads)} attention layers but the given module has "
                             f"{len(blocks)}")
    for block, dense in zip(blocks, structure.dense_heads, strict=True):
        if block.num_heads != dense or tuple(block.original_heads) != tuple(range(dense)):
            raise UserInputError(f"layer {block.layer} of the given module has {block.num_heads} heads, but {source} "
                                 f"was pruned from {dense}; pass a fresh, unpruned module of the same architecture")
    for layer in structure.output_bias:
        if not 0 <= layer < len(blocks):
            raise UserInputError(f"{source}: an output bias is recorded for layer {layer}, but there are {len(blocks)}")
        if adapter.output_projection(model, layer).bias is None:
            adapter.add_output_bias(model, layer)
    try:
        apply_plan(model, PruningPlan(structure.dense_heads, structure.kept_heads))
    except ValueError as error:  # UserInputError is one too
        raise UserInputError(f"{source}: its kept heads do not fit the given module ({error})") from None
    if structure.ffn_widths is not None:
        cut_ffn_widths(model, structure.ffn_widths, source, structure.ffn_dense_widths)
    if structure.ffn_output_bias:
        _add_ffn_output_biases(model, structure.ffn_output_bias, source)
    return model


def _cut_stack(model: nn.Module, stack: LayerStack, source: str) -> None:
    try:
        container = model.get_submodule(stack.path)
    except AttributeError:
        container = None
    if not isinstance(container, nn.ModuleList):
        raise UserInputError(f"{source} has a stack of layers at {stack.path!r}; the given module "
                             f"({type(model).__name__}) has none there")
    if len(container) == stack.dense and len(stack.kept) < stack.dense:
        adapter = adapter_for(model)
        gone = [container[p] for p in range(stack.dense) if p not in set(stack.kept)]
        layers = [i for i, module in enumerate(adapter.layer_modules(model)) if any(module is g for g in gone)]
        try:
            adapter.remove_layers(model, layers)
        except ValueError as error:
            raise UserInputError(f"{source}: cannot remove layers {layers} of the given module ({error})") from None
        container = model.get_submodule(stack.path)
    elif len(container) != len(stack.kept):
        raise UserInputError(f"{stack.path} of the given module has {len(container)} layers; {source} kept "
                             f"{len(stack.kept)} of {stack.dense}")
    record_kept_layers(container, stack.dense, stack.kept)


def cut_ffn_widths(model: nn.Module, widths: list[int], source: str, dense: list[int] | None = None) -> None:
    """Slice each layer's FFN of a freshly built model to its recorded width (the weights come next).

    `dense`: each layer's width in the dense model the record was cut from (None: unknown, any wider layer is
    cut). A layer the record shows uncut is left as it is, so a module of another width fails on its weights; a
    layer already at its recorded width (a model rebuilt from the pruned config) only notes its dense width."""
    from edgeprune.pruning.ffn import remove_neurons

    blocks = adapter_for(model).feed_forwards(model)
    current = [block.width for block in blocks]
    if len(widths) != len(current) or (dense is not None and len(dense) != len(current)) or any(
            not 0 < w <= max(c, d) for w, c, d in zip(widths, current, dense or current, strict=False)):
        raise UserInputError(f"{source}: the record of FFN widths {widths} does not fit a model of {len(current)} "
                             f"layers with FFN width {max(current)}")
    remove = {}
    for layer, (block, width) in enumerate(zip(blocks, widths, strict=True)):
        original = None if dense is None else dense[layer]
        if block.width == width or original == width:
            if original is not None and original != width:
                block.record_dense_width(original)
            continue
        if width > block.width or (original is not None and block.width != original):
            raise UserInputError(f"{source}: layer {layer}'s FFN was cut to {width} neurons from {original}, but the "
                                 f"given module's has {block.width}; pass a fresh, unpruned module of the same "
                                 "architecture")
        remove[layer] = list(range(width, block.width))
    remove_neurons(model, remove)


def _add_ffn_output_biases(model: nn.Module, layers: list[int], source: str) -> None:
    blocks = adapter_for(model).feed_forwards(model)
    for layer in layers:
        if not 0 <= layer < len(blocks):
            raise UserInputError(f"{source}: FFN output bias recorded for layer {layer}, but there are {len(blocks)}")
        output = blocks[layer].output
        if output.bias is None:
            weight = output.weight
            output.bias = nn.Parameter(torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device),
                                       requires_grad=weight.requires_grad)
