"""DistilBERT: one attention module per block with q_lin/k_lin/v_lin/out_lin linears."""

from contextlib import AbstractContextManager

import torch
from torch import nn

from edgeprune.models.base import (
    KEPT_HEADS_CONFIG_KEY,
    AttentionBlock,
    AttentionProbsFn,
    HeadOutputFn,
    hooks_removed_after,
)
from edgeprune.models.bert import BertAdapter, slice_linear


def _is_distilbert_layer(module: nn.Module) -> bool:
    attention = getattr(module, "attention", None)
    return (
        attention is not None
        and all(isinstance(getattr(attention, n, None), nn.Linear) for n in ("q_lin", "k_lin", "v_lin", "out_lin"))
        and hasattr(attention, "n_heads")
        and hasattr(attention, "attention_head_size")
    )


class DistilBertAdapter(BertAdapter):
    """Config bookkeeping (kept-heads record, layer removal) is BERT's; the attention layout differs."""

    family = "distilbert"

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return any(_is_distilbert_layer(m) for m in model.modules())

    def _layers(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model.modules() if _is_distilbert_layer(m)]

    def _original_heads(self, model: nn.Module) -> list[list[int]]:
        config = self._config(model)
        kept = getattr(config, KEPT_HEADS_CONFIG_KEY, None) if config is not None else None
        if kept is None:
            return [list(range(layer.attention.n_heads)) for layer in self._layers(model)]
        return [list(heads) for heads in kept]

    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        dense_heads = getattr(self._config(model), "n_heads", 0)
        return [
            AttentionBlock(
                layer=index,
                num_heads=layer.attention.n_heads,
                num_kv_heads=layer.attention.n_heads,
                head_size=layer.attention.attention_head_size,
                original_heads=tuple(original),
                dense_heads=dense_heads,
            )
            for index, (layer, original) in enumerate(zip(self._layers(model), self._original_heads(model),
                                                          strict=True))
        ]

    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        handles = []
        for index, layer in enumerate(self._layers(model)):
            size = layer.attention.attention_head_size

            def per_head(_module: nn.Module, args: tuple, index: int = index, size: int = size) -> tuple:
                (context, *rest) = args
                return (fn(index, context.unflatten(-1, (-1, size))).flatten(-2), *rest)

            handles.append(layer.attention.out_lin.register_forward_pre_hook(per_head))
        return hooks_removed_after(handles)

    def attention_probs_hook(self, model: nn.Module, fn: AttentionProbsFn) -> AbstractContextManager[None]:
        handles = []
        for index, layer in enumerate(self._layers(model)):
            def capture(_module: nn.Module, _args: tuple, output: tuple, index: int = index) -> None:
                if output[1] is None:
                    raise RuntimeError("attention probabilities are unavailable; load the model with "
                                       "attn_implementation='eager'")
                fn(index, output[1])

            handles.append(layer.attention.register_forward_hook(capture))
        return hooks_removed_after(handles)

    def output_projection(self, model: nn.Module, layer: int) -> nn.Linear:
        return self._layers(model)[layer].attention.out_lin

    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        attention = self._layers(model)[layer].attention
        size = attention.attention_head_size
        rows = slice(head * size, (head + 1) * size)
        projections = (attention.q_lin, attention.k_lin, attention.v_lin)
        views = [lin.weight[rows] for lin in projections] + [attention.out_lin.weight[:, rows]]
        views += [lin.bias[rows] for lin in projections if lin.bias is not None]
        return views

    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        super().remove_layers(model, layers)
        for module in model.modules():  # the encoder (`Transformer`) keeps its own layer count
            if isinstance(getattr(module, "layer", None), nn.ModuleList) and hasattr(module, "n_layers"):
                module.n_layers = len(module.layer)

    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        attention = self._layers(model)[layer].attention
        current = attention.n_heads
        size = attention.attention_head_size
        drop = set(heads)
        if not drop:
            return
        if not drop <= set(range(current)):
            absent = sorted(drop - set(range(current)))
            raise ValueError(f"layer {layer} has heads 0..{current - 1}; cannot remove {absent}")
        keep = [h for h in range(current) if h not in drop]
        if not keep:
            raise ValueError(f"layer {layer}: removing all {current} heads would leave no attention; keep at least one")
        original = self._original_heads(model)
        index = torch.cat([torch.arange(h * size, (h + 1) * size) for h in keep])
        attention.q_lin = slice_linear(attention.q_lin, index, 0)
        attention.k_lin = slice_linear(attention.k_lin, index, 0)
        attention.v_lin = slice_linear(attention.v_lin, index, 0)
        attention.out_lin = slice_linear(attention.out_lin, index, 1)
        # forward reshapes by attention_head_size (unchanged); `dim` stays the hidden size the block maps
        attention.n_heads = len(keep)

        config = self._config(model)
        if config is not None:
            original[layer] = [original[layer][h] for h in keep]
            setattr(config, KEPT_HEADS_CONFIG_KEY, original)

    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        attention = self._layers(model)[layer].attention
        size = attention.attention_head_size
        qkv = 3 * (attention.q_lin.in_features * size + (size if attention.q_lin.bias is not None else 0))
        return qkv + attention.out_lin.out_features * size
