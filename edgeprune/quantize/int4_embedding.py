"""Embedding table stored as 4-bit rows (two per byte) with one fp32 scale per row.

Unpacked with integer division, which ExecuTorch's core ATen opset has; bit shifts are not in it.
"""

import torch
from torch import nn


class Int4Embedding(nn.Module):
    def __init__(self, packed: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("packed", packed)  # uint8 [rows, dim / 2]: low nibble even column, high odd
        self.register_buffer("scale", scale)
        self.num_embeddings, self.embedding_dim = packed.shape[0], packed.shape[1] * 2

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> "Int4Embedding":
        weight = embedding.weight.detach().float()
        if weight.shape[1] % 2:
            raise ValueError(f"4-bit rows pack two values per byte; the width {weight.shape[1]} is odd")
        scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 7.0
        levels = (torch.round(weight / scale).clamp(-8, 7) + 8).to(torch.uint8)
        return cls(levels[:, 0::2] | (levels[:, 1::2] << 4), scale)

    @property
    def weight(self) -> torch.Tensor:
        return self.forward(torch.arange(self.num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.packed[ids].to(torch.int32)
        high = torch.div(rows, 16, rounding_mode="floor")
        levels = torch.stack([rows - high * 16, high], dim=-1).flatten(-2)
        return (levels.to(torch.float32) - 8.0) * self.scale[ids]
