"""The fast attention path of a KV-cached generator: ExecuTorch's own LLM kernels (`llama::update_cache` writes
a step's keys and values into a `[1, context, kv_heads, head_dim]` cache at a start position; `llama::custom_sdpa`
attends a step's queries to the cache up to start + S, causally, with grouped KV heads natively), the ops
ExecuTorch's Llama export uses (`use_sdpa_with_kv_cache`). The portable path (kv_cache.py) masks every cache slot
and repeats KV heads in aten ops outside XNNPACK; this one touches only the slots in use.

The kernels live in `executorch.extension.llm.custom_ops` (a shared library the import loads, for tracing and for
the Python runtime alike): a program built on them loads only in a process that imported it, so the torch-free
native runner of the boards runs the portable path.

Hugging Face's attention layers call `cache.update(...)` then the attention function `config._attn_implementation`
names; `cached_sdpa_forward` registers one under ATTENTION_NAME and selects it for the call. The start position
travels as an attention keyword (`TransformersKwargs` pass through every layer to the attention function).
"""

import functools

import torch
from torch import nn

from edgeprune.generation.grouped_attention import attention_implementation
from edgeprune.generation.kv_cache import CacheLayout, StaticKVCache

# how an exported generator attends: aten ops only (any ExecuTorch runtime, the boards' native runner included) or
# ExecuTorch's LLM kernels (a runtime that links them: the Python one after `load_custom_ops`)
ATTENTION_PATHS = ("portable", "fast")

ATTENTION_NAME = "edgeprune_custom_sdpa"
START_KEYWORD = "edgeprune_cache_start"


def load_custom_ops() -> None:
    """Register `torch.ops.llama.*` and load their kernels into the ExecuTorch runtime of this process."""
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - the import registers them


def custom_ops_available() -> bool:
    try:
        load_custom_ops()
    except (ImportError, OSError):
        return False
    return True


class SdpaKVCache(nn.Module):
    """Per-layer key and value buffers `[1, context, kv_heads, head_dim]` (sequence before heads, the layout the
    kernels take), written by `llama::update_cache` at `start`. Duck-types the one method of transformers' `Cache`
    that attention layers call."""

    attention = "fast"

    def __init__(self, layout: CacheLayout, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.layout = layout
        for index, (heads, size) in enumerate(zip(layout.kv_heads, layout.head_dim, strict=True)):
            self.register_buffer(f"keys_{index}", torch.zeros(1, layout.context, heads, size, dtype=dtype),
                                 persistent=False)
            self.register_buffer(f"values_{index}", torch.zeros(1, layout.context, heads, size, dtype=dtype),
                                 persistent=False)
        self.start: int | torch.SymInt = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = getattr(self, f"keys_{layer_idx}"), getattr(self, f"values_{layer_idx}")
        # the layer hands [1, heads, S, head_dim]; the kernels take [1, S, heads, head_dim]
        torch.ops.llama.update_cache(key_states.transpose(1, 2).to(keys.dtype), keys, self.start)
        torch.ops.llama.update_cache(value_states.transpose(1, 2).to(values.dtype), values, self.start)
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:  # noqa: ARG002 - Cache's signature
        return 0


def custom_sdpa_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          **kwargs: object) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention-function signature over the cache `SdpaKVCache.update` returned (`key`, `value`:
    the whole `[1, context, kv_heads, head_dim]` buffers): output `[1, S, heads, head_dim]`, as the layer expects."""
    start = kwargs[START_KEYWORD]
    output = torch.ops.llama.custom_sdpa(query.transpose(1, 2), key, value, start, None, 0.0, True,
                                         scaling)
    return output, None


@functools.cache  # once per process: the registry is global
def register_attention() -> None:
    from transformers import AttentionInterface

    load_custom_ops()
    AttentionInterface.register(ATTENTION_NAME, custom_sdpa_attention)


def cached_sdpa_forward(model: nn.Module, cache: SdpaKVCache, input_ids: torch.Tensor,
                        cache_position: torch.Tensor) -> torch.Tensor:
    """Logits `[1, S, vocab]` of `input_ids [1, S]` at positions `cache_position [S]` (consecutive, from its
    first), their keys and values written to `cache` there; the same values as `kv_cache.cached_forward`."""
    register_attention()
    start = cache_position[0].item()
    torch._check_is_size(start)
    torch._check(start + input_ids.shape[1] <= cache.layout.context)
    cache.start = start
    # a 4-D placeholder mask: transformers passes a prepared mask through untouched (none is built), and the
    # kernels mask causally from `start` themselves
    placeholder = torch.zeros(1, 1, 1, 1)
    with attention_implementation(model, ATTENTION_NAME):
        return model(input_ids=input_ids, attention_mask=placeholder, position_ids=cache_position[None],
                     cache=cache, use_cache=True, **{START_KEYWORD: start}).logits


def make_cache(layout: CacheLayout, attention: str) -> nn.Module:
    """An empty cache of `layout` for attention path `attention` (one of ATTENTION_PATHS)."""
    return SdpaKVCache(layout) if attention == "fast" else StaticKVCache(layout)


def uses_custom_ops(cache: nn.Module | None) -> bool:
    return isinstance(cache, SdpaKVCache)
