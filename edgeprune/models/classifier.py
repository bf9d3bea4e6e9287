"""The deployable module for text classification: encoder, mean pooling, linear head."""

from typing import Any

import torch
from torch import nn


class EncoderClassifier(nn.Module):
    """Returns (logits, pooled embedding) so one artifact serves both the label and the vector."""

    def __init__(self, encoder: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.encoder = encoder
        self.classifier = classifier

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        embedding = mean_pool(hidden, attention_mask)
        return self.classifier(embedding), embedding


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class SequenceClassifier(nn.Module):
    """A Hugging Face *ForSequenceClassification model with the artifact's calling convention: (logits,)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.model(input_ids=input_ids, attention_mask=attention_mask).logits,)


class EncoderEmbedder(nn.Module):
    """An encoder with sentence-transformers pooling ("mean", "cls" or "max"), optionally L2-normalized."""

    def __init__(self, encoder: nn.Module, pooling: str = "mean", normalize: bool = False) -> None:
        super().__init__()
        if pooling not in ("mean", "cls", "max"):
            raise ValueError(f"pooling must be mean, cls or max, got {pooling!r}")
        self.encoder = encoder
        self.pooling = pooling
        self.normalize = normalize

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor]:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            embedding = hidden[:, 0]
        elif self.pooling == "max":
            masked = hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, torch.finfo(hidden.dtype).min)
            embedding = masked.max(dim=1).values
        else:
            embedding = mean_pool(hidden, attention_mask)
        if self.normalize:
            embedding = torch.nn.functional.normalize(embedding, dim=-1)
        return (embedding,)


class CausalLMLogits(nn.Module):
    """A causal LM as the artifact runs it: token ids in, next-token logits out.

    With `context` (cache slots) it is also the KV-cached generator phones run: `forward(input_ids [1, S],
    cache_position [S])` writes the tokens' keys and values into a static per-layer cache (sized from the weights
    as they are, so after pruning too) and returns their logits; without `cache_position` it is the plain
    full-sequence forward (any batch, no cache) that scoring, recovery and PyTorch evaluation use."""

    def __init__(self, model: nn.Module, context: int | None = None, attention: str = "portable") -> None:
        super().__init__()
        from edgeprune.generation import ATTENTION_PATHS

        if attention not in ATTENTION_PATHS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_PATHS)}, got {attention!r}")
        self.model = model
        self.context = context
        # the exported program's attention (generation/fast_attention.py); PyTorch itself always runs the portable
        # path, so that verification compares the two
        self.attention = attention
        self.kv_cache: nn.Module | None = None  # made on first cached use (non-persistent buffers)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor]:
        if cache_position is None:
            # the mask is for scoring batches (the text convention of the head criteria); the artifact takes ids only
            return (self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits,)
        from edgeprune.generation import cached_forward, cached_sdpa_forward, uses_custom_ops

        if not torch.compiler.is_compiling():  # under export the cache was made by `program_spec`
            self.refresh_cache("portable")
        if uses_custom_ops(self.kv_cache):
            return (cached_sdpa_forward(self.model, self.kv_cache, input_ids, cache_position),)
        return (cached_forward(self.model, self.kv_cache, input_ids, cache_position),)

    def refresh_cache(self, attention: str = "portable") -> None:
        """(Re)make the KV cache of `attention`'s path when there is none, it is the other path's, or the
        weights' layout changed (heads or layers removed)."""
        from edgeprune.generation import CacheLayout, make_cache

        if self.context is None:
            raise ValueError("this causal LM has no context length: construct it with context=N to cache keys")
        layout = CacheLayout.of(self.model, self.context)
        if self.kv_cache is None or self.kv_cache.layout != layout or self.kv_cache.attention != attention:
            self.kv_cache = make_cache(layout, attention)

    def program_options(self) -> dict[str, Any]:
        """What shapes the exported program beside the weights (part of the export cache's key): the cache length,
        the attention path and the token ids its metadata names (a model whose config names another end of text
        is another program)."""
        config = self.model.config
        return {"context": self.context, "attention": self.attention, "bos": config.bos_token_id,
                "eos": config.eos_token_id}

    def program_spec(self, example_inputs: tuple[torch.Tensor, ...]) -> "Any":
        """The generator's dynamic prefill length (1 to the example's length) and the metadata ExecuTorch's LLM
        runner reads; None for the plain forward."""
        if len(example_inputs) < 2:
            return None
        from edgeprune.generation import ProgramSpec

        self.refresh_cache(self.attention)
        config = self.model.config
        prefill = int(example_inputs[0].shape[1])
        tokens = torch.export.Dim("tokens", min=1, max=max(prefill, 2))
        eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
        metadata: dict[str, Any] = {"get_max_seq_len": prefill, "get_max_context_len": self.context,
                                    "use_kv_cache": True,
                                    "use_sdpa_with_kv_cache": self.attention == "fast",
                                    "enable_dynamic_shape": True, "get_vocab_size": int(config.vocab_size),
                                    "get_n_layers": len(self.kv_cache.layout.kv_heads),
                                    # edgeprune's own: the bytes of the cache buffers the program keeps
                                    "get_kv_cache_bytes": sum(b.numel() * b.element_size()
                                                              for b in self.kv_cache.buffers())}
        if config.bos_token_id is not None:
            metadata["get_bos_id"] = int(config.bos_token_id)
        if eos and eos[0] is not None:
            metadata["get_eos_ids"] = [int(e) for e in eos]
        return ProgramSpec(({1: tokens}, {0: tokens}), metadata)


class ImageClassifier(nn.Module):
    """pixel_values in, (logits,) out: a model's own image head, or a vision encoder's [CLS] with a linear head."""

    def __init__(self, model: nn.Module, classifier: nn.Linear | None = None) -> None:
        super().__init__()
        self.model = model
        self.classifier = classifier

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor]:
        if self.classifier is None:
            return (self.model(pixel_values=pixel_values).logits,)
        hidden = self.model(pixel_values=pixel_values).last_hidden_state
        return (self.classifier(hidden[:, 0]),)
