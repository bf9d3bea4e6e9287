"""ViT-like image encoders (ViT, DeiT): `ViTLayer.attention` holds q_proj/k_proj/v_proj/o_proj.

transformers 5 flattened ViT's attention; the 4.x layout (`attention.attention.query`,
`attention.output.dense`) is not what this adapter looks for.
"""

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

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _is_vit_layer(module: nn.Module) -> bool:
    attention = getattr(module, "attention", None)
    if attention is None or not all(isinstance(getattr(attention, n, None), nn.Linear) for n in _PROJECTIONS):
        return False
    # attention variants with per-head tables (relative position bias, ...) would need those sliced too
    only_projections = all(name.split(".")[0] in _PROJECTIONS for name, _ in attention.named_parameters())
    return (
        only_projections
        and hasattr(attention, "num_attention_heads")
        and hasattr(attention, "head_dim")
        and attention.k_proj.out_features == attention.q_proj.out_features  # no grouped-query attention
        and isinstance(getattr(module, "layernorm_before", None), nn.LayerNorm)
        and isinstance(getattr(module, "layernorm_after", None), nn.LayerNorm)
    )


class ViTAdapter(BertAdapter):
    """Config bookkeeping (kept-heads record, layer removal) is BERT's; the attention layout differs."""

    family = "vit"

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return any(_is_vit_layer(m) for m in model.modules())

    def _layers(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model.modules() if _is_vit_layer(m)]

    def _original_heads(self, model: nn.Module) -> list[list[int]]:
        config = self._config(model)
        kept = getattr(config, KEPT_HEADS_CONFIG_KEY, None) if config is not None else None
        if kept is None:
            return [list(range(layer.attention.num_attention_heads)) for layer in self._layers(model)]
        return [list(heads) for heads in kept]

    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        dense_heads = getattr(self._config(model), "num_attention_heads", 0)
        return [
            AttentionBlock(
                layer=index,
                num_heads=layer.attention.num_attention_heads,
                num_kv_heads=layer.attention.num_attention_heads,
                head_size=layer.attention.head_dim,
                original_heads=tuple(original),
                dense_heads=dense_heads,
            )
            for index, (layer, original) in enumerate(zip(self._layers(model), self._original_heads(model),
                                                          strict=True))
        ]

    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        handles = []
        for index, layer in enumerate(self._layers(model)):
            size = layer.attention.head_dim

            def per_head(_module: nn.Module, args: tuple, index: int = index, size: int = size) -> tuple:
                (context, *rest) = args
                return (fn(index, context.unflatten(-1, (-1, size))).flatten(-2), *rest)

            handles.append(layer.attention.o_proj.register_forward_pre_hook(per_head))
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
        return self._layers(model)[layer].attention.o_proj

    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        attention = self._layers(model)[layer].attention
        rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        views = [lin.weight[rows] for lin in projections] + [attention.o_proj.weight[:, rows]]
        views += [lin.bias[rows] for lin in projections if lin.bias is not None]
        return views

    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        attention = self._layers(model)[layer].attention
        current = attention.num_attention_heads
        size = attention.head_dim
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
        attention.q_proj = slice_linear(attention.q_proj, index, 0)
        attention.k_proj = slice_linear(attention.k_proj, index, 0)
        attention.v_proj = slice_linear(attention.v_proj, index, 0)
        attention.o_proj = slice_linear(attention.o_proj, index, 1)
        attention.num_attention_heads = len(keep)

        config = self._config(model)
        if config is not None:
            original[layer] = [original[layer][h] for h in keep]
            setattr(config, KEPT_HEADS_CONFIG_KEY, original)

    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        attention = self._layers(model)[layer].attention
        size = attention.head_dim
        qkv = 3 * (attention.q_proj.in_features * size + (size if attention.q_proj.bias is not None else 0))
        return qkv + attention.o_proj.out_features * size
