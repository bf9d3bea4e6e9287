"""Attention over a KV cache without repeating it per query head: grouped-query attention with the query heads of
each KV head folded into its rows.

transformers' eager attention expands the cache to every query head first (`repeat_kv`: expand and reshape). Lowered
for a runtime that is a copy of the whole cache per layer and step; LiteRT runs it as a BROADCAST_TO in its reference
kernel, which was 64 % of a SmolLM2 decode step (docs/FINDINGS.md). Here the query `[1, heads, S, D]` is viewed as
`[1, kv_heads, groups × S, D]` (query head h = kv × groups + g, as `repeat_kv` pairs them), so that each KV head's
keys and values are read by two batched matmuls, never copied. Same values as the eager path; LiteRT's generator
signatures (static lengths) use it.
"""

import contextlib
import functools
from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import nn

GROUPED_ATTENTION = "edgeprune_grouped"  # the name it is registered under in transformers' AttentionInterface
# the two products as einsums, not matmuls of a transposed key: litert-torch lowers `matmul(q, k.transpose(2, 3))` to a
# TRANSPOSE of the whole cache and a BATCH_MATMUL, these to BATCH_MATMULs alone (one attention over a SmolLM2-sized
# layer's cache: 65 → 38 µs on LiteRT; docs/FINDINGS.md)
SCORES = "bkqd,bkcd->bkqc"  # [1, kv, rows, D] · [1, kv, slots, D] → [1, kv, rows, slots]
WEIGHTED = "bkqc,bkcd->bkqd"  # [1, kv, rows, slots] · [1, kv, slots, D] → [1, kv, rows, D]


def grouped_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: object) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention-function signature: query `[1, heads, S, D]`, key and value the whole cache `[1,
    kv_heads, context, D]`, the additive mask `[1, 1, S, context]`; output `[1, S, heads, D]`. Key and value given
    as `CacheAndNew` pairs go to `split_attention`."""
    if isinstance(key, CacheAndNew):
        return split_attention(query, key, value, attention_mask, scaling)
    batch, heads, length, size = query.shape
    kv_heads, slots = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else size ** -0.5
    # [1, kv_heads, groups × S, D]: rows (g, s) of KV head kv (static S only: torch.export cannot prove this reshape
    # for a dynamic prefill). Matmuls that broadcast the keys over the groups instead are lowered by litert-torch
    # with the same BROADCAST_TO this avoids
    grouped = query.reshape(batch, kv_heads, groups * length, size)
    scores = torch.einsum(SCORES, grouped, key) * scale
    scores = scores.reshape(batch, kv_heads, groups, length, slots) + attention_mask[:, :, None, :, :slots]
    weights = torch.softmax(scores.reshape(batch, kv_heads, groups * length, slots), dim=-1)
    output = torch.einsum(WEIGHTED, weights, value).reshape(batch, heads, length, size)
    return output.transpose(1, 2).contiguous(), None


class CacheAndNew(NamedTuple):
    """A layer's keys (or values) as two tensors never joined: the cache as the call received it `[1, kv_heads,
    context, D]` and the call's own tokens' `[1, kv_heads, S, D]`."""

    cache: torch.Tensor
    new: torch.Tensor


def split_attention(query: torch.Tensor, key: CacheAndNew, value: CacheAndNew, attention_mask: torch.Tensor,
                    scaling: float | None) -> tuple[torch.Tensor, None]:
    """`grouped_attention` over the cache and the call's own tokens without writing them into one tensor: the
    scores over both are joined (`[groups × S, context + S]`, small), one softmax, and the output is the sum of the
    two halves' weighted values. The additive mask is `[1, 1, S, context + S]`. Writing the new rows into the cache
    inside the graph (a DYNAMIC_UPDATE_SLICE) copies the whole cache every call: a fifth of a SmolLM2 decode step
    on LiteRT (docs/FINDINGS.md)."""
    batch, heads, length, size = query.shape
    kv_heads, slots = key.cache.shape[1], key.cache.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else size ** -0.5
    grouped = query.reshape(batch, kv_heads, groups * length, size)
    scores = torch.cat([torch.einsum(SCORES, grouped, key.cache), torch.einsum(SCORES, grouped, key.new)],
                       dim=-1) * scale
    scores = scores.reshape(batch, kv_heads, groups, length, slots + length) + attention_mask[:, :, None]
    weights = torch.softmax(scores.reshape(batch, kv_heads, groups * length, slots + length), dim=-1)
    output = torch.einsum(WEIGHTED, weights[..., :slots], value.cache) + \
        torch.einsum(WEIGHTED, weights[..., slots:], value.new)
    return output.reshape(batch, heads, length, size).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def attention_implementation(model: nn.Module, name: str) -> Iterator[None]:
    """`model`'s layers dispatch to attention function `name` inside the block, to their own again after."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


@functools.cache  # once per process: the registry is global
def register_grouped_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)


@contextlib.contextmanager
def grouped_attention_in(model: nn.Module) -> Iterator[None]:
    """`model`'s attention layers call `grouped_attention` inside the block (a Hugging Face model's config says
    which function its layers dispatch to)."""
    register_grouped_attention()
    with attention_implementation(model, GROUPED_ATTENTION):
        yield
