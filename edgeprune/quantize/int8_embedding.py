"""Embedding table stored as int8 rows with one fp32 scale per row.

Written with plain gather and multiply ops so it lowers to any ExecuTorch runtime: torchao's
quantized embedding needs `torchao::dequantize_affine`, which the stock runtime lacks (REFERENCE.md).
"""

import torch
from torch import nn


class Int8Embedding(nn.Module):
    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        self.num_embeddings, self.embedding_dim = qweight.shape

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> "Int8Embedding":
        weight = embedding.weight.detach().float()
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        qweight = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
        return cls(qweight, scale)

    @property
    def weight(self) -> torch.Tensor:
        """Dequantized table, for code that reads `.weight` (e.g. tied output layers)."""
        return self.qweight.float() * self.scale

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.qweight[ids].to(torch.float32) * self.scale[ids]
