"""Decoders with grouped-query attention (Llama, Qwen2, SmolLM2, ...): q/k/v/o projections, KV heads shared.

Query heads are grouped: KV head g serves the `num_key_value_groups` consecutive query heads
g * groups ... (g + 1) * groups - 1. A layer stays well formed as long as every remaining KV head serves
the same number of query heads, so heads leave either as whole KV groups (the KV head with all its
query heads) or as the same number of query heads from every group. A combination of the two (whole
groups plus the same number from every other group) is what two such steps leave, so it is accepted too:
that is how `edgeprune.load` rebuilds a model pruned in several steps from its kept query heads alone.
A KV head goes exactly when all its query heads go, so the kept query heads determine the kept KV heads.
The FFN is a gated MLP: `mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))`.
"""

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Literal

import torch
from torch import nn

from edgeprune.models.base import (
    ADAPTERS,
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
    record_heads,
    recorded_heads,
    split_heads_before,
)
from edgeprune.models.separate_projections import slice_linear

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
# config attribute listing the layers whose o_proj carries a bias the family's config cannot express (added
# by bias compensation); `remove_heads` recreates it, so `edgeprune.load` rebuilds the same architecture
OUTPUT_BIAS_CONFIG_KEY = "edgeprune_output_bias_layers"
# the MLP keeps its own width in `intermediate_size`
_GATED_MLP = FeedForwardLayout(inputs=("mlp.gate_proj", "mlp.up_proj"), activation="mlp.act_fn",
                               output="mlp.down_proj", owner="mlp", width_attribute="intermediate_size")
_ALLOWED_FORMS = ("remove either whole KV groups (a KV head with all its query heads) or the same number of "
                  "query heads from every group (or whole groups plus the same number from every other group)")


def _is_projection(module: object) -> bool:
    """An nn.Linear, or a module standing for one in an export (a fused projection's part, its rows of one shared
    linear: edgeprune/quantize/fused_projections.py), whose widths the KV cache's layout is read from."""
    return isinstance(module, nn.Linear) or (isinstance(module, nn.Module) and all(
        isinstance(getattr(module, width, None), int) for width in ("in_features", "out_features")))


def _is_gqa_attention(module: nn.Module) -> bool:
    if not all(_is_projection(getattr(module, n, None)) for n in _PROJECTIONS):
        return False
    config = getattr(module, "config", None)
    if not (hasattr(module, "num_key_value_groups") or hasattr(config, "num_key_value_heads")):
        return False
    head_dim = getattr(module, "head_dim", None)
    if not isinstance(head_dim, int) or module.q_proj.out_features % head_dim:
        return False
    # parameters outside the projections must be per-head-dim (e.g. Qwen3's q_norm), or slicing breaks them
    projections = {id(p) for n in _PROJECTIONS for p in getattr(module, n).parameters()}
    return all(p.shape[-1] == head_dim for p in module.parameters() if id(p) not in projections)


def _is_decoder_layer(module: nn.Module) -> bool:
    attention = getattr(module, "self_attn", None)
    return isinstance(attention, nn.Module) and _is_gqa_attention(attention)


def gqa_removal_is_valid(num_heads: int, num_kv_heads: int, removed: Sequence[int]) -> str | None:
    """Why removing query heads `removed` (positions 0..num_heads-1) would break grouped-query attention,
    or None when it is valid.

    Valid: whole KV groups (all `num_heads // num_kv_heads` query heads of a group), the same number of
    query heads from every group, or whole groups plus the same number from every other group; at least
    one query head must remain.
    """
    if num_kv_heads <= 0 or num_heads % num_kv_heads:
        return f"{num_heads} query heads cannot be split evenly among {num_kv_heads} KV heads"
    drop = set(removed)
    absent = sorted(h for h in drop if not 0 <= h < num_heads)
    if absent:
        return f"there are query heads 0..{num_heads - 1}; cannot remove {absent}"
    if len(drop) >= num_heads:
        return f"removing all {num_heads} query heads would leave no attention; keep at least one"
    size = num_heads // num_kv_heads
    taken = [sum(h in drop for h in range(g * size, (g + 1) * size)) for g in range(num_kv_heads)]
    if len({t for t in taken if t < size}) <= 1:
        return None
    groups = [list(range(g * size, (g + 1) * size)) for g in range(num_kv_heads)]
    return (f"removing query heads {sorted(drop)} takes {taken} heads from the {num_kv_heads} KV groups "
            f"{groups}; {_ALLOWED_FORMS}")


def round_to_gqa(scores: Sequence[float], num_kv_heads: int, remove: int,
                 form: Literal["auto", "groups", "per_group"] = "auto") -> list[int]:
    """Snap a wish to remove `remove` query heads of one layer to a valid GQA removal; returns positions.

    `scores` holds one importance score per current query head (higher = more important). The count is
    rounded to the nearest one a form can reach (ties round down, at least one head is always kept):
    form "groups" drops the whole KV groups with the lowest summed score, form "per_group" drops the same
    number of lowest-scoring query heads from every group, and "auto" takes whichever form gets closest to
    `remove`, then the one losing less total score. Pure: it only reads its arguments.
    """
    num_heads = len(scores)
    if form not in ("auto", "groups", "per_group"):
        raise ValueError(f"form must be 'auto', 'groups' or 'per_group', got {form!r}")
    if num_kv_heads <= 0 or num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot be split evenly among {num_kv_heads} KV heads")
    size = num_heads // num_kv_heads
    groups = [list(range(g * size, (g + 1) * size)) for g in range(num_kv_heads)]
    candidates = []
    if form in ("auto", "groups"):
        by_score = sorted(range(num_kv_heads), key=lambda g: (sum(scores[h] for h in groups[g]), g))
        for count in range(num_kv_heads):
            candidates.append(sorted(h for g in by_score[:count] for h in groups[g]))
    if form in ("auto", "per_group"):
        for count in range(size):
            lowest = [sorted(group, key=lambda h: (scores[h], h))[:count] for group in groups]
            candidates.append(sorted(h for heads in lowest for h in heads))
    return min(candidates, key=lambda c: (abs(len(c) - remove), len(c), sum(scores[h] for h in c)))


@ADAPTERS.register("llama")
class LlamaAdapter(ModelAdapter):
    family = "llama"
    remote_layout = dict(attention="self_attn", query="self_attn.q_proj", key="self_attn.k_proj",
                         value="self_attn.v_proj", output="self_attn.o_proj", head_size="head_dim",
                         head_count=("num_heads", "num_attention_heads"), kv_head_count=("num_key_value_heads",),
                         ffn_inputs=("mlp.gate_proj", "mlp.up_proj"), ffn_output="mlp.down_proj", ffn_owner="mlp",
                         ffn_width=("intermediate_size",))
    separate_kv_heads = True

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        return any(_is_decoder_layer(m) for m in model.modules())

    def _layers(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model.modules() if _is_decoder_layer(m)]

    def _config(self, model: nn.Module) -> object | None:
        return find_config(model)

    @staticmethod
    def _shape(attention: nn.Module) -> tuple[int, int, int]:
        """(query heads, KV heads, head size) as the weights are now."""
        size = attention.head_dim
        return attention.q_proj.out_features // size, attention.k_proj.out_features // size, size

    def _original_heads(self, model: nn.Module) -> list[list[int]]:
        return recorded_heads(model, [self._shape(layer.self_attn)[0] for layer in self._layers(model)])

    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        blocks = []
        dense_heads = getattr(self._config(model), "num_attention_heads", 0)
        for index, (layer, original) in enumerate(zip(self._layers(model), self._original_heads(model), strict=True)):
            heads, kv_heads, size = self._shape(layer.self_attn)
            blocks.append(AttentionBlock(layer=index, num_heads=heads, num_kv_heads=kv_heads, head_size=size,
                                         original_heads=tuple(original), dense_heads=dense_heads))
        return blocks

    def layer_modules(self, model: nn.Module) -> list[nn.Module]:
        return self._layers(model)

    def feed_forwards(self, model: nn.Module) -> list[FeedForward]:
        return [_GATED_MLP.find(layer, index, self.family) for index, layer in enumerate(self._layers(model))]

    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        return split_heads_before([(layer.self_attn.o_proj, layer.self_attn.head_dim)
                                   for layer in self._layers(model)], fn)

    def attention_probs_hook(self, model: nn.Module, fn: AttentionProbsFn) -> AbstractContextManager[None]:
        layers = self._layers(model)
        implementation = getattr(getattr(layers[0].self_attn, "config", None), "_attn_implementation", None)
        if implementation != "eager":
            raise RuntimeError(f"attention probabilities need attn_implementation='eager' (the model uses "
                               f"{implementation!r}); load it with attn_implementation='eager' or call "
                               "model.set_attn_implementation('eager')")
        return capture_attention_probs([layer.self_attn for layer in layers], fn)

    def output_projection(self, model: nn.Module, layer: int) -> nn.Linear:
        return self._layers(model)[layer].self_attn.o_proj

    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        """The query rows and output columns of query head `head`; its group's K/V rows are shared, so
        they are not listed (they leave only with the whole group, see `removed_parameter_count`)."""
        attention = self._layers(model)[layer].self_attn
        size = attention.head_dim
        rows = slice(head * size, (head + 1) * size)
        views = [attention.q_proj.weight[rows], attention.o_proj.weight[:, rows]]
        if attention.q_proj.bias is not None:
            views.append(attention.q_proj.bias[rows])
        return views

    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        """Parameters one query head owns: its query rows (and bias) and output columns, not shared K/V."""
        attention = self._layers(model)[layer].self_attn
        size = attention.head_dim
        q_bias = size if attention.q_proj.bias is not None else 0
        return attention.q_proj.in_features * size + q_bias + attention.o_proj.out_features * size

    def removed_parameter_count(self, model: nn.Module, layer: int, heads: Sequence[int]) -> int:
        """Parameters that removing query heads `heads` (current positions) takes out, K/V rows of whole
        groups included; raises ValueError for a removal that is not valid GQA."""
        if not heads:
            return 0
        attention = self._layers(model)[layer].self_attn
        num_heads, num_kv_heads, size = self._shape(attention)
        reason = gqa_removal_is_valid(num_heads, num_kv_heads, heads)
        if reason:
            raise ValueError(f"layer {layer}: {reason}")
        drop = set(heads)
        group = num_heads // num_kv_heads
        gone = sum(all(h in drop for h in range(g * group, (g + 1) * group)) for g in range(num_kv_heads))
        per_kv = sum(lin.in_features * size + (size if lin.bias is not None else 0)
                     for lin in (attention.k_proj, attention.v_proj))
        return len(drop) * self.head_parameter_count(model, layer) + gone * per_kv

    def add_output_bias(self, model: nn.Module, layer: int) -> None:
        """Llama/Qwen2 o_proj has no bias (Llama's `attention_bias` would add one to q/k/v too), so the layer
        is recorded in the config and the bias is recreated whenever the layer is rebuilt by `remove_heads`."""
        super().add_output_bias(model, layer)
        config = self._config(model)
        if config is not None:
            recorded = set(getattr(config, OUTPUT_BIAS_CONFIG_KEY, None) or [])
            setattr(config, OUTPUT_BIAS_CONFIG_KEY, sorted(recorded | {layer}))

    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        attention = self._layers(model)[layer].self_attn
        num_heads, num_kv_heads, size = self._shape(attention)
        drop = set(heads)
        if not drop:
            return
        if layer in (getattr(self._config(model), OUTPUT_BIAS_CONFIG_KEY, None) or []):
            super().add_output_bias(model, layer)
        reason = gqa_removal_is_valid(num_heads, num_kv_heads, drop)
        if reason:
            raise ValueError(f"layer {layer}: {reason}")
        group = num_heads // num_kv_heads
        keep = [h for h in range(num_heads) if h not in drop]
        keep_kv = [g for g in range(num_kv_heads) if any(h not in drop for h in range(g * group, (g + 1) * group))]
        original = self._original_heads(model)

        attention.q_proj = slice_linear(attention.q_proj, head_rows(keep, size), 0)
        attention.o_proj = slice_linear(attention.o_proj, head_rows(keep, size), 1)
        if len(keep_kv) < num_kv_heads:
            attention.k_proj = slice_linear(attention.k_proj, head_rows(keep_kv, size), 0)
            attention.v_proj = slice_linear(attention.v_proj, head_rows(keep_kv, size), 0)
        # repeat_kv (eager and sdpa) expands each KV head num_key_value_groups times to meet the queries
        attention.num_key_value_groups = len(keep) // len(keep_kv)
        for name, value in (("num_heads", len(keep)), ("num_attention_heads", len(keep)),
                            ("num_key_value_heads", len(keep_kv))):
            if hasattr(attention, name):
                setattr(attention, name, value)

        original[layer] = [original[layer][h] for h in keep]
        record_heads(model, original)

    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        modules = self._layers(model)
        drop = set(layers)
        config = self._config(model)
        if getattr(config, "is_heterogeneous", False):
            raise ValueError("removing layers from a model with a per-layer (heterogeneous) config is not supported")
        kept = drop_layers(model, modules, drop)
        # caches are indexed by layer_idx, so the remaining layers are renumbered 0..n-1
        for index, layer in enumerate(kept):
            for module in (layer, layer.self_attn):
                if hasattr(module, "layer_idx"):
                    module.layer_idx = index
        if config is None:
            return
        biased = getattr(config, OUTPUT_BIAS_CONFIG_KEY, None)
        if biased:
            remaining = [i for i in range(len(modules)) if i not in drop]
            setattr(config, OUTPUT_BIAS_CONFIG_KEY, [remaining.index(i) for i in biased if i in remaining])
        old_count = len(modules)
        for name in [n for n in vars(config) if n.endswith("layer_types")]:
            values = getattr(config, name)
            if isinstance(values, list | tuple) and len(values) == old_count:
                setattr(config, name, [v for i, v in enumerate(values) if i not in drop])
        for module in model.modules():
            if hasattr(module, "has_sliding_layers") and isinstance(getattr(config, "layer_types", None), list):
                module.has_sliding_layers = "sliding_attention" in config.layer_types
