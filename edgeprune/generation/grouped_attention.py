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

import torch
from torch import nn

GROUPED_ATTENTION = "edgeprune_grouped"  # the name it is registered under in transformers' AttentionInterface


def grouped_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs: object) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention-function signature: query `[1, heads, S, D]`, key and value the whole cache `[1,
    kv_heads, context, D]`, the additive mask `[1, 1, S, context]`; output `[1, S, heads, D]`."""
    batch, heads, length, size = query.shape
    kv_heads, slots = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else size ** -0.5
    # [1, kv_heads, groups × S, D]: rows (g, s) of KV head kv (static S only: torch.export cannot prove this reshape
    # for a dynamic prefill). Matmuls that broadcast the keys over the groups instead are lowered by litert-torch
    # with the same BROADCAST_TO this avoids
    grouped = query.reshape(batch, kv_heads, groups * length, size)
    scores = torch.matmul(grouped, key.transpose(2, 3)) * scale
    scores = scores.reshape(batch, kv_heads, groups, length, slots) + attention_mask[:, :, None, :, :slots]
    weights = torch.softmax(scores.reshape(batch, kv_heads, groups * length, slots), dim=-1)
    output = torch.matmul(weights, value).reshape(batch, heads, length, size)
    return output.transpose(1, 2).contiguous(), None


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
