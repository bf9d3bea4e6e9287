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
