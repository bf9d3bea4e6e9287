"""A decoder as phones run it: a static KV cache held as buffers, one forward of `(input_ids [1, S],
cache_position [S]) → logits [1, S, vocab]` for both prefill (S up to the prefill length) and decode (S = 1).

Each layer's cache is sized from its own weights (`k_proj.out_features // head_dim` KV heads), so a pruned
model whose layers keep different numbers of query and KV heads gets exactly the cache it needs. transformers'
`StaticCache` could size per layer (`early_initialization` takes lists), but its layers advance their own write
counter (`cumulative_length`) instead of writing at `cache_position`, and its export wrapper reads one global
`num_key_value_heads`; the cache here is a plain module that writes where the caller says, which is what
ExecuTorch's LLM runner (and our own decode loop) passes: the position of each token.

The mask is made here, additive over the whole cache: query at position p sees cache slots 0..p. Slots past
p may hold another sequence's keys (the cache is never cleared): they are masked, so a new sequence simply
starts again at position 0.
"""

from dataclasses import dataclass

import torch
from torch import nn

from edgeprune.models import adapter_for


@dataclass(frozen=True)
class CacheLayout:
    """The KV cache a decoder needs: per layer, KV heads and head size; the context length (cache slots)."""

    kv_heads: tuple[int, ...]
    head_dim: tuple[int, ...]
    context: int
    bytes_per_element: int = 4

    @classmethod
    def of(cls, model: nn.Module, context: int, bytes_per_element: int = 4) -> "CacheLayout":
        blocks = adapter_for(model).attention_blocks(model)
        return cls(tuple(b.num_kv_heads for b in blocks), tuple(b.head_size for b in blocks), context,
                   bytes_per_element)

    @property
    def bytes_per_token(self) -> int:
        """Keys and values of one token in every layer: 2 × Σ kv_heads × head_dim × bytes."""
        return 2 * sum(h * d for h, d in zip(self.kv_heads, self.head_dim, strict=True)) * self.bytes_per_element

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_token * self.context


class StaticKVCache(nn.Module):
    """Per-layer key and value buffers `[1, kv_heads, context, head_dim]`, written in place at the positions
    `position` holds (set by `cached_forward` before the layers run). Duck-types the one method of
    transformers' `Cache` that attention layers call."""

    attention = "portable"  # the path of generation/fast_attention.py ATTENTION_PATHS it serves

    def __init__(self, layout: CacheLayout, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.layout = layout
        for index, (heads, size) in enumerate(zip(layout.kv_heads, layout.head_dim, strict=True)):
            self.register_buffer(f"keys_{index}", torch.zeros(1, heads, layout.context, size, dtype=dtype),
                                 persistent=False)
            self.register_buffer(f"values_{index}", torch.zeros(1, heads, layout.context, size, dtype=dtype),
                                 persistent=False)
        self.position: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = getattr(self, f"keys_{layer_idx}"), getattr(self, f"values_{layer_idx}")
        keys.index_copy_(2, self.position, key_states.to(keys.dtype))
        values.index_copy_(2, self.position, value_states.to(values.dtype))
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:  # noqa: ARG002 - Cache's signature
        return 0  # positions always come from cache_position, never from the cache


def cached_forward(model: nn.Module, cache: StaticKVCache, input_ids: torch.Tensor,
                   cache_position: torch.Tensor) -> torch.Tensor:
    """Logits `[1, S, vocab]` of `input_ids [1, S]` at positions `cache_position [S]`, their keys and values
    written to `cache` there. `model` is a Hugging Face causal LM in eager or sdpa attention (the mask passed is
    additive over every cache slot)."""
    slots = torch.arange(cache.layout.context, device=cache_position.device)
    visible = slots[None, :] <= cache_position[:, None]  # [S, context]: a query sees its own and earlier slots
    mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)[None, None]
    cache.position = cache_position
    return model(input_ids=input_ids, attention_mask=mask, position_ids=cache_position[None], cache=cache,
                 use_cache=True).logits
