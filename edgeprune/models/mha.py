"""Plain `torch.nn.MultiheadAttention` (alone or in nn.TransformerEncoderLayer/DecoderLayer).

nn.MultiheadAttention derives head_dim = embed_dim // num_heads, so it cannot hold fewer heads than
embed_dim implies. Pruned modules become `PrunedMultiheadAttention`: same call and return, same
parameter names, any head count. It also gives the hooks a place to stand: the dense module feeds
`out_proj.weight` to a fused function and never calls `out_proj`, so while a hook is active each
dense module is temporarily swapped for a `PrunedMultiheadAttention` sharing its parameters (and
nn.TransformerEncoder's nested-tensor path, which would hand the hooks NestedTensors, is turned off).

A layer's FFN is the `linear1`, `activation`, `linear2` of the nn.TransformerEncoderLayer around it; an
attention module outside one has no FFN.
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.hooks import RemovableHandle

from edgeprune.errors import UserInputError
from edgeprune.models.base import (
    ADAPTERS,
    AttentionBlock,
    AttentionProbsFn,
    FeedForward,
    FeedForwardFn,
    FeedForwardLayout,
    HeadOutputFn,
    ModelAdapter,
    head_rows,
    heads_to_keep,
    hooks_removed_after,
    kept_layer_record,
    record_kept_layers,
)
from edgeprune.models.separate_projections import slice_linear

_ENCODER_FFN = FeedForwardLayout(inputs=("linear1",), activation="activation", output="linear2")


class PrunedMultiheadAttention(nn.Module):
    """nn.MultiheadAttention with `num_heads` heads of `head_dim` each, not necessarily embed_dim in total."""

    # nn.TransformerEncoderLayer and nn.TransformerEncoder only take their fused kernels (which assume
    # head_dim = embed_dim // num_heads) when this is True
    _qkv_same_embed_dim = False

    def __init__(self, embed_dim: int, num_heads: int, head_dim: int, *, bias: bool = True,
                 out_bias: bool = True, add_bias_kv: bool = False, add_zero_attn: bool = False,
                 dropout: float = 0.0, batch_first: bool = False, original_heads: tuple[int, ...] | None = None,
                 dense_heads: int | None = None, device: torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        options = {"device": device, "dtype": dtype}
        inner = num_heads * head_dim
        self.embed_dim = self.kdim = self.vdim = embed_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout = dropout
        self.batch_first = batch_first
        self.add_zero_attn = add_zero_attn
        # for each head, its index in the dense module (the record HF families keep in their config)
        self.original_heads = tuple(range(num_heads)) if original_heads is None else tuple(original_heads)
        self.dense_heads = num_heads if dense_heads is None else dense_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * inner, embed_dim, **options))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * inner, **options)) if bias else None
        self.out_proj = nn.Linear(inner, embed_dim, bias=out_bias, **options)
        self.bias_k = nn.Parameter(torch.zeros(1, 1, inner, **options)) if add_bias_kv else None
        self.bias_v = nn.Parameter(torch.zeros(1, 1, inner, **options)) if add_bias_kv else None
        self.attention_probs = nn.Identity()  # hook point: probabilities [batch, heads, queries, keys]
        nn.init.xavier_uniform_(self.in_proj_weight)

    @classmethod
    def sharing(cls, dense: nn.MultiheadAttention) -> "PrunedMultiheadAttention":
        """The same attention as `dense`, computed here, with `dense`'s own parameters (not copies)."""
        _check_packed(dense)
        module = cls(dense.embed_dim, dense.num_heads, dense.head_dim, bias=dense.in_proj_bias is not None,
                     out_bias=dense.out_proj.bias is not None, add_bias_kv=dense.bias_k is not None,
                     add_zero_attn=dense.add_zero_attn, dropout=dense.dropout, batch_first=dense.batch_first,
                     device=dense.in_proj_weight.device, dtype=dense.in_proj_weight.dtype)
        module.in_proj_weight = dense.in_proj_weight
        module.in_proj_bias = dense.in_proj_bias
        module.out_proj = dense.out_proj
        module.bias_k, module.bias_v = dense.bias_k, dense.bias_v
        return module.train(dense.training)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: torch.Tensor | None = None, need_weights: bool = True,
                attn_mask: torch.Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint (as nn.MultiheadAttention does)")
        batched = query.dim() == 3
        if not batched:  # unbatched: (tokens, embed_dim)
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        batch, queries, _ = query.shape
        weight_q, weight_k, weight_v = self.in_proj_weight.chunk(3)
        bias_q, bias_k, bias_v = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.chunk(3)
        q = F.linear(query, weight_q, bias_q)
        k = F.linear(key, weight_k, bias_k)
        v = F.linear(value, weight_v, bias_v)

        attn_mask = _additive(attn_mask, q.dtype)
        key_padding_mask = _additive(key_padding_mask, q.dtype)
        if self.bias_k is not None and self.bias_v is not None:
            k = torch.cat([k, self.bias_k.expand(batch, 1, -1)], dim=1)
            v = torch.cat([v, self.bias_v.expand(batch, 1, -1)], dim=1)
            attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
        q, k, v = (t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2) for t in (q, k, v))
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(batch, self.num_heads, 1, self.head_dim)], dim=2)
            v = torch.cat([v, v.new_zeros(batch, self.num_heads, 1, self.head_dim)], dim=2)
            attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)

        scores = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)  # [batch, heads, queries, keys]
        if attn_mask is not None:
            if attn_mask.dim() == 3:  # [batch * heads, queries, keys] (or [heads, ...] unbatched)
                attn_mask = attn_mask.view(batch, self.num_heads, queries, -1)
            scores = scores + attn_mask
        if key_padding_mask is not None:
            scores = scores + key_padding_mask[:, None, None, :]
        probs = self.attention_probs(scores.softmax(dim=-1))
        probs = F.dropout(probs, p=self.dropout if self.training else 0.0)
        output = self.out_proj((probs @ v).transpose(1, 2).flatten(-2))

        if not batched:
            output, probs = output.squeeze(0), probs.squeeze(0)
        elif not self.batch_first:
            output = output.transpose(0, 1)
        if not need_weights:
            return output, None
        return output, probs.mean(dim=-3) if average_attn_weights else probs

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
                f"batch_first={self.batch_first}, original_heads={self.original_heads}")


Attention = nn.MultiheadAttention | PrunedMultiheadAttention


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """nn.MultiheadAttention's mask convention: bool True = not allowed, float = added to the scores."""
    if mask is None or mask.is_floating_point():
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask.bool(), float("-inf"))


def _pad_key(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else F.pad(mask, (0, 1))


def _check_packed(module: nn.Module) -> None:
    if isinstance(module, nn.MultiheadAttention) and not module._qkv_same_embed_dim:
        raise UserInputError("nn.MultiheadAttention with kdim or vdim different from embed_dim (separate "
                             "q/k/v projection weights) is not supported by the mha adapter")


def _is_attention(module: nn.Module) -> bool:
    return isinstance(module, Attention)


def _is_transformers_model(model: nn.Module) -> bool:
    transformers = sys.modules.get("transformers")  # a transformers model means transformers is imported
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


@ADAPTERS.register("mha")
class MultiheadAttentionAdapter(ModelAdapter):
    """The layers are the attention modules in module order; the dense-head record lives on each module."""

    family = "mha"
    ffn_width_config = None  # plain modules have no config to keep true

    @classmethod
    def matches(cls, model: nn.Module) -> bool:
        # transformers models that use nn.MultiheadAttention somewhere (e.g. a pooling head) belong to their own family
        return not _is_transformers_model(model) and any(_is_attention(m) for m in model.modules())

    def _slots(self, model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
        """(parent, attribute name, attention module) for every attention module, in order."""
        slots = []
        for name, module in model.named_modules():
            if not _is_attention(module):
                continue
            if not name:
                raise UserInputError("the model is a bare attention module; wrap it in a container (e.g. "
                                     "nn.Sequential) so that pruned heads can replace it")
            parent_name, _, attribute = name.rpartition(".")
            slots.append((model.get_submodule(parent_name), attribute, module))
        return slots

    def _attentions(self, model: nn.Module) -> list[Attention]:
        return [module for _, _, module in self._slots(model)]

    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        blocks = []
        for index, module in enumerate(self._attentions(model)):
            pruned = isinstance(module, PrunedMultiheadAttention)
            blocks.append(AttentionBlock(
                layer=index,
                num_heads=module.num_heads,
                num_kv_heads=module.num_heads,
                head_size=module.head_dim,
                original_heads=module.original_heads if pruned else tuple(range(module.num_heads)),
                dense_heads=module.dense_heads if pruned else module.num_heads,
            ))
        return blocks

    def layer_modules(self, model: nn.Module) -> list[nn.Module]:
        return [parent if isinstance(parent, nn.TransformerEncoderLayer) and name == "self_attn" else module
                for parent, name, module in self._slots(model)]

    def feed_forwards(self, model: nn.Module) -> list[FeedForward]:
        return [_ENCODER_FFN.find(layer, index, self.family) for index, layer in enumerate(self.layer_modules(model))]

    @contextmanager
    def feed_forward_hook(self, model: nn.Module, fn: FeedForwardFn) -> Iterator[None]:
        with self._computed_here(model), super().feed_forward_hook(model, fn):
            yield

    @contextmanager
    def _computed_here(self, model: nn.Module) -> Iterator[list[PrunedMultiheadAttention]]:
        """Context in which every attention module is a PrunedMultiheadAttention (dense ones swapped, then restored)."""
        with ExitStack() as restore:
            for parent, name, module in self._slots(model):
                if not isinstance(module, PrunedMultiheadAttention):
                    setattr(parent, name, PrunedMultiheadAttention.sharing(module))
                    restore.callback(setattr, parent, name, module)
            for encoder in model.modules():
                # the encoder's nested-tensor path hands padded batches as NestedTensors to the layers
                if isinstance(encoder, nn.TransformerEncoder) and getattr(encoder, "use_nested_tensor", False):
                    encoder.use_nested_tensor = False
                    restore.callback(setattr, encoder, "use_nested_tensor", True)
            yield self._attentions(model)

    @contextmanager
    def _hooked(self, model: nn.Module,
                register: Callable[[int, PrunedMultiheadAttention], RemovableHandle]) -> Iterator[None]:
        with self._computed_here(model) as modules, hooks_removed_after(
                [register(index, module) for index, module in enumerate(modules)]):
            yield

    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        def register(index: int, module: PrunedMultiheadAttention) -> RemovableHandle:
            def per_head(_module: nn.Module, args: tuple) -> tuple:
                (context, *rest) = args
                return (fn(index, context.unflatten(-1, (-1, module.head_dim))).flatten(-2), *rest)

            return module.out_proj.register_forward_pre_hook(per_head)

        return self._hooked(model, register)

    def attention_probs_hook(self, model: nn.Module, fn: AttentionProbsFn) -> AbstractContextManager[None]:
        def register(index: int, module: PrunedMultiheadAttention) -> RemovableHandle:
            def capture(_module: nn.Module, _args: tuple, probs: torch.Tensor) -> None:
                fn(index, probs)

            return module.attention_probs.register_forward_hook(capture)

        return self._hooked(model, register)

    def output_projection(self, model: nn.Module, layer: int) -> nn.Linear:
        return self._attentions(model)[layer].out_proj

    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        module = self._attentions(model)[layer]
        _check_packed(module)
        inner = module.num_heads * module.head_dim
        rows = [slice(part * inner + head * module.head_dim, part * inner + (head + 1) * module.head_dim)
                for part in range(3)]
        views = [module.in_proj_weight[r] for r in rows]
        views.append(module.out_proj.weight[:, rows[0]])
        if module.in_proj_bias is not None:
            views += [module.in_proj_bias[r] for r in rows]
        if module.bias_k is not None:
            views += [module.bias_k[0, 0, rows[0]], module.bias_v[0, 0, rows[0]]]
        return views

    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        parent, name, module = self._slots(model)[layer]
        _check_packed(module)
        current, size = module.num_heads, module.head_dim
        if not heads:
            return
        keep = heads_to_keep(layer, current, heads)
        blocks = self.attention_blocks(model)
        index = head_rows(keep, size)
        rows = torch.cat([index + part * current * size for part in range(3)])

        def sliced(parameter: nn.Parameter, dim: int, keep_index: torch.Tensor) -> nn.Parameter:
            data = parameter.detach().index_select(dim, keep_index.to(parameter.device)).clone()
            return nn.Parameter(data, requires_grad=parameter.requires_grad)

        pruned = PrunedMultiheadAttention(
            module.embed_dim, len(keep), size, bias=module.in_proj_bias is not None,
            out_bias=module.out_proj.bias is not None, add_bias_kv=module.bias_k is not None,
            add_zero_attn=module.add_zero_attn, dropout=module.dropout, batch_first=module.batch_first,
            original_heads=tuple(blocks[layer].original_heads[h] for h in keep), dense_heads=blocks[layer].dense_heads,
            device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        pruned.in_proj_weight = sliced(module.in_proj_weight, 0, rows)
        if module.in_proj_bias is not None:
            pruned.in_proj_bias = sliced(module.in_proj_bias, 0, rows)
        pruned.out_proj = slice_linear(module.out_proj, index.to(module.out_proj.weight.device), 1)
        if module.bias_k is not None:
            pruned.bias_k = sliced(module.bias_k, 2, index)
            pruned.bias_v = sliced(module.bias_v, 2, index)
        setattr(parent, name, pruned.train(module.training))
        for encoder in model.modules():
            # the encoder's nested-tensor path would hand NestedTensors to the pruned attention
            if isinstance(encoder, nn.TransformerEncoder) and any(m is pruned for m in encoder.modules()):
                encoder.use_nested_tensor = False

    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        """Drop whole nn.TransformerEncoderLayers; a bare attention module has no residual path to fall back on."""
        slots = self._slots(model)
        drop = set(layers)
        if not drop <= set(range(len(slots))) or len(drop) >= len(slots):
            raise ValueError(f"can remove some of layers 0..{len(slots) - 1} but not all; got {sorted(layers)}")
        modules = self.layer_modules(model)
        containers = {}
        for layer in sorted(drop):
            if _is_attention(modules[layer]):
                raise ValueError(f"layer {layer} is an attention module outside an nn.TransformerEncoderLayer; "
                                 "only whole encoder layers can be removed")
            container = next((m for m in model.modules() if isinstance(m, nn.ModuleList)
                              and any(child is modules[layer] for child in m)), None)
            if container is None:
                raise ValueError(f"layer {layer} is not in an nn.ModuleList, so it cannot be removed")
            containers.setdefault(id(container), (container, []))[1].append(modules[layer])
        for container, removed in containers.values():
            if len(removed) == len(container):
                raise ValueError("removing these layers would leave an empty encoder; keep at least one layer")
        for container, removed in containers.values():
            dense, positions = kept_layer_record(container)
            stays = [not any(m is r for r in removed) for m in container]
            kept = [m for m, stay in zip(container, stays, strict=True) if stay]
            del container[:]
            container.extend(kept)
            record_kept_layers(container, dense, [p for p, stay in zip(positions, stays, strict=True) if stay])
        for encoder in model.modules():
            if isinstance(encoder, nn.TransformerEncoder):
                encoder.num_layers = len(encoder.layers)

    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        module = self._attentions(model)[layer]
        size = module.head_dim
        count = 3 * module.embed_dim * size + module.out_proj.out_features * size
        count += 3 * size if module.in_proj_bias is not None else 0
        count += 2 * size if module.bias_k is not None else 0
        return count
