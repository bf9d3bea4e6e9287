"""Encoders whose attention has separate Q/K/V linears and an output projection (BERT, DistilBERT, ViT).

A family is a `ProjectionLayout` (where the linears and head counts live inside one layer), a
`FeedForwardLayout` (where its FFN parts live) and a test that recognizes its layers; everything else —
hooks, surgery, bookkeeping — is shared here.
"""

from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch import nn

from edgeprune.models.base import (
    AttentionBlock,
    AttentionProbsFn,
    FeedForward,
    FeedForwardLayout,
    HeadOutputFn,
    ModelAdapter,
    capture_attention_probs,
    drop_layers,
    find_config,
    head_rows,
    heads_to_keep,
    record_heads,
    recorded_heads,
    split_heads_before,
)


@dataclass(frozen=True)
class ProjectionLayout:
    """Dotted paths from one transformer layer to its attention parts."""

    attention: str  # the module whose forward returns (context, attention probabilities)
    query: str
    key: str
    value: str
    output: str
    heads_attr: str  # head count, an attribute of `attention`
    size_attr: str  # head size, an attribute of `attention`
    dense_heads_config: str = "num_attention_heads"  # config attribute with the dense head count


def _get(root: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        root = getattr(root, part)
    return root


def _set(root: nn.Module, path: str, value: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(_get(root, parent) if parent else root, name, value)


def slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping `index` along the weight's `dim` (0: output rows, 1: input columns)."""
    weight = linear.weight.detach().index_select(dim, index).clone()
    bias = None
    if linear.bias is not None:
        bias = linear.bias.detach().clone() if dim == 1 else linear.bias.detach()[index].clone()
    out_features, in_features = weight.shape
    new = nn.Linear(in_features, out_features, bias=bias is not None, dtype=weight.dtype)
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


class SeparateProjectionsAdapter(ModelAdapter):
    layout: ProjectionLayout
    ffn_layout: FeedForwardLayout

    @staticmethod
    def is_layer(module: nn.Module) -> bool:
        raise NotImplementedError

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return any(cls.is_layer(m) for m in model.modules())

    def _layers(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model.modules() if self.is_layer(m)]

    def _attention(self, layer: nn.Module) -> nn.Module:
        return _get(layer, self.layout.attention)

    def _shape(self, layer: nn.Module) -> tuple[int, int]:
        attention = self._attention(layer)
        return getattr(attention, self.layout.heads_attr), getattr(attention, self.layout.size_attr)

    def _set_head_count(self, layer: nn.Module, heads: int) -> None:
        setattr(self._attention(layer), self.layout.heads_attr, heads)

    def _original_heads(self, model: nn.Module) -> list[list[int]]:
        return recorded_heads(model, [self._shape(layer)[0] for layer in self._layers(model)])

    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        dense_heads = getattr(find_config(model), self.layout.dense_heads_config, 0)
        blocks = []
        for index, (layer, original) in enumerate(zip(self._layers(model), self._original_heads(model), strict=True)):
            heads, size = self._shape(layer)
            blocks.append(AttentionBlock(layer=index, num_heads=heads, num_kv_heads=heads, head_size=size,
                                         original_heads=tuple(original), dense_heads=dense_heads))
        return blocks

    def layer_modules(self, model: nn.Module) -> list[nn.Module]:
        return self._layers(model)

    def feed_forwards(self, model: nn.Module) -> list[FeedForward]:
        return [self.ffn_layout.find(layer, index, self.family) for index, layer in enumerate(self._layers(model))]

    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        layers = self._layers(model)
        return split_heads_before([(_get(layer, self.layout.output), self._shape(layer)[1]) for layer in layers], fn)

    def attention_probs_hook(self, model: nn.Module, fn: AttentionProbsFn) -> AbstractContextManager[None]:
        return capture_attention_probs([self._attention(layer) for layer in self._layers(model)], fn)

    def output_projection(self, model: nn.Module, layer: int) -> nn.Linear:
        return _get(self._layers(model)[layer], self.layout.output)

    def _qkv(self, layer: nn.Module) -> list[nn.Linear]:
        return [_get(layer, path) for path in (self.layout.query, self.layout.key, self.layout.value)]

    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        module = self._layers(model)[layer]
        size = self._shape(module)[1]
        rows = slice(head * size, (head + 1) * size)
        projections = self._qkv(module)
        views = [lin.weight[rows] for lin in projections] + [_get(module, self.layout.output).weight[:, rows]]
        views += [lin.bias[rows] for lin in projections if lin.bias is not None]
        return views

    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        return sum(view.numel() for view in self.head_weights(model, layer, 0))

    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        if not heads:
            return
        module = self._layers(model)[layer]
        current, size = self._shape(module)
        keep = heads_to_keep(layer, current, heads)
        original = self._original_heads(model)
        index = head_rows(keep, size)
        for path in (self.layout.query, self.layout.key, self.layout.value):
            _set(module, path, slice_linear(_get(module, path), index, 0))
        _set(module, self.layout.output, slice_linear(_get(module, self.layout.output), index, 1))
        self._set_head_count(module, len(keep))
        original[layer] = [original[layer][h] for h in keep]
        record_heads(model, original)

    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        drop_layers(model, self._layers(model), set(layers))
