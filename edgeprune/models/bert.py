"""BERT-like encoders (BERT, MiniLM, RoBERTa): separate Q/K/V linears and an output projection."""

from contextlib import AbstractContextManager

import torch
from torch import nn

from edgeprune.models.base import (
    KEPT_HEADS_CONFIG_KEY,
    AttentionBlock,
    AttentionProbsFn,
    HeadOutputFn,
    ModelAdapter,
    hooks_removed_after,
)


def _is_bert_layer(module: nn.Module) -> bool:
    attention = getattr(module, "attention", None)
    self_attention = getattr(attention, "self", None)
    return (
        self_attention is not None
        and all(isinstance(getattr(self_attention, n, None), nn.Linear) for n in ("query", "key", "value"))
        and isinstance(getattr(getattr(attention, "output", None), "dense", None), nn.Linear)
        and hasattr(self_attention, "num_attention_heads")
        and hasattr(self_attention, "attention_head_size")
    )


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


class BertAdapter(ModelAdapter):
    family = "bert"

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return any(_is_bert_layer(m) for m in model.modules())

    def _layers(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model.modules() if _is_bert_layer(m)]

    def _config(self, model: nn.Module) -> object | None:
        for module in model.modules():
            config = getattr(module, "config", None)
            if config is not None and hasattr(config, "num_attention_heads"):
                return config
        return None

    def _original_heads(self, model: nn.Module) -> list[list[int]]:
        layers = self._layers(model)
        config = self._config(model)
        kept = getattr(config, KEPT_HEADS_CONFIG_KEY, None) if config is not None else None
        if kept is None:
            return [list(range(layer.attention.self.num_attention_heads)) for layer in layers]
        return [list(heads) for heads in kept]

    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        blocks = []
        for index, (layer, original) in enumerate(zip(self._layers(model), self._original_heads(model), strict=True)):
            attention = layer.attention.self
            blocks.append(
                AttentionBlock(
                    layer=index,
                    num_heads=attention.num_attention_heads,
                    num_kv_heads=attention.num_attention_heads,
                    head_size=attention.attention_head_size,
                    original_heads=tuple(original),
                    dense_heads=getattr(self._config(model), "num_attention_heads", 0),
                )
            )
        return blocks

    def layer_modules(self, model: nn.Module) -> list[nn.Module]:
        return self._layers(model)

    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        handles = []
        for index, layer in enumerate(self._layers(model)):
            size = layer.attention.self.attention_head_size

            def per_head(_module: nn.Module, args: tuple, index: int = index, size: int = size) -> tuple:
                (context, *rest) = args
                heads = context.unflatten(-1, (-1, size))
                return (fn(index, heads).flatten(-2), *rest)

            handles.append(layer.attention.output.dense.register_forward_pre_hook(per_head))
        return hooks_removed_after(handles)

    def attention_probs_hook(self, model: nn.Module, fn: AttentionProbsFn) -> AbstractContextManager[None]:
        handles = []
        for index, layer in enumerate(self._layers(model)):
            def capture(_module: nn.Module, _args: tuple, output: tuple, index: int = index) -> None:
                if output[1] is None:
                    raise RuntimeError("attention probabilities are unavailable; load the model with "
                                       "attn_implementation='eager'")
                fn(index, output[1])

            handles.append(layer.attention.self.register_forward_hook(capture))
        return hooks_removed_after(handles)

    def output_projection(self, model: nn.Module, layer: int) -> nn.Linear:
        return self._layers(model)[layer].attention.output.dense

    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        module = self._layers(model)[layer]
        attention = module.attention.self
        rows = slice(head * attention.attention_head_size, (head + 1) * attention.attention_head_size)
        views = [attention.query.weight[rows], attention.key.weight[rows], attention.value.weight[rows],
                 module.attention.output.dense.weight[:, rows]]
        views += [lin.bias[rows] for lin in (attention.query, attention.key, attention.value) if lin.bias is not None]
        return views

    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        modules = self._layers(model)
        drop = set(layers)
        if not drop <= set(range(len(modules))) or len(drop) >= len(modules):
            raise ValueError(f"can remove some of layers 0..{len(modules) - 1} but not all; got {sorted(layers)}")
        original = self._original_heads(model)
        container = next(m for m in model.modules() if isinstance(m, nn.ModuleList) and modules[0] in list(m))
        kept = nn.ModuleList(m for i, m in enumerate(container) if i not in drop)
        for parent in model.modules():
            for name, child in list(parent.named_children()):
                if child is container:
                    setattr(parent, name, kept)
        config = self._config(model)
        if config is not None:
            config.num_hidden_layers = len(kept)
            if getattr(config, KEPT_HEADS_CONFIG_KEY, None) is not None:
                setattr(config, KEPT_HEADS_CONFIG_KEY, [h for i, h in enumerate(original) if i not in drop])

    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        layers = self._layers(model)
        module = layers[layer]
        attention = module.attention.self
        current = attention.num_attention_heads
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
        attention.query = slice_linear(attention.query, index, 0)
        attention.key = slice_linear(attention.key, index, 0)
        attention.value = slice_linear(attention.value, index, 0)
        module.attention.output.dense = slice_linear(module.attention.output.dense, index, 1)
        attention.num_attention_heads = len(keep)
        attention.all_head_size = len(keep) * size

        config = self._config(model)
        if config is not None:
            original[layer] = [original[layer][h] for h in keep]
            setattr(config, KEPT_HEADS_CONFIG_KEY, original)

    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        module = self._layers(model)[layer]
        attention = module.attention.self
        size = attention.attention_head_size
        hidden = attention.query.in_features
        out_hidden = module.attention.output.dense.out_features
        qkv = 3 * (hidden * size + (size if attention.query.bias is not None else 0))
        return qkv + out_hidden * size
