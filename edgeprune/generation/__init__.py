"""Decoders as generators: a static KV cache sized per layer, its program's metadata, prefill and decode through
the runtime, and the figures a team decides a generator by (time to first token, decode tokens/s, KV bytes)."""

from edgeprune.generation.fast_attention import (
                                                 ATTENTION_PATHS,
                                                 SdpaKVCache,
                                                 cached_sdpa_forward,
                                                 load_custom_ops,
                                                 make_cache,
                                                 uses_custom_ops,
)
from edgeprune.generation.kv_cache import CacheLayout, StaticKVCache, cached_forward
from edgeprune.generation.program import ProgramSpec

__all__ = ["ATTENTION_PATHS", "CacheLayout", "ProgramSpec", "SdpaKVCache", "StaticKVCache", "cached_forward",
           "cached_sdpa_forward", "load_custom_ops", "make_cache", "uses_custom_ops"]
