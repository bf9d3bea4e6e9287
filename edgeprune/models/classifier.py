"""The deployable module for text classification: encoder, mean pooling, linear head."""

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
    """A causal LM as the artifact runs it: token ids in, next-token logits out, no cache."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor]:
        # the mask is for scoring batches (the text convention of the head criteria); the artifact takes ids only
        return (self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits,)


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
