"""Embedding table stored as 4-bit values (two per byte) with one fp16 scale per group of columns of a row.

Groups, not one scale per row: on a recovered MiniLM (12 of 72 heads removed, FFN −50 %, 2 layers removed) 4-bit
tables with one scale per row cost 2.7 points of validation accuracy (96.42 % → 93.73 %, PyTorch), nearly all of
the int4 recipe's loss; groups of 64 columns cost none (96.42 %), groups of 32 0.3 point (docs/FINDINGS.md). A
row's few large values no longer set the step of all its others. fp16 scales (relative error 2⁻¹¹, far below a
4-bit step) keep the overhead at 2 bytes a group: 12 bytes a 384-wide row, against 4 for one fp32 scale.

Unpacked with integer division, which ExecuTorch's core ATen opset has; bit shifts are not in it.
"""

import torch
from torch import nn

EMBEDDING_GROUP = 64  # columns that share one scale, where the width allows (`group_size`)
SCALE_BYTES = 2  # fp16


def group_size(width: int) -> int:
    """Columns per scale for a table `width` wide: the largest of 64, 32, ..., 2 that divides it."""
    for size in (EMBEDDING_GROUP, 32, 16, 8, 4, 2):
        if width % size == 0:
            return size
    raise ValueError(f"4-bit rows pack two values per byte; the width {width} is odd")


def scale_bytes_per_row(width: int) -> int:
    """What the scales of one row of a table `width` wide take in the artifact."""
    return width // group_size(width) * SCALE_BYTES


class Int4Embedding(nn.Module):
    def __init__(self, packed: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("packed", packed)  # uint8 [rows, dim / 2]: low nibble even column, high odd
        self.register_buffer("scale", scale)  # fp16 [rows, groups]
        self.num_embeddings, self.embedding_dim = packed.shape[0], packed.shape[1] * 2
        self.groups = scale.shape[1]
        self.group_size = self.embedding_dim // self.groups

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> "Int4Embedding":
        weight = embedding.weight.detach().float()
        rows, width = weight.shape
        size = group_size(width)
        grouped = weight.reshape(rows, width // size, size)
        # symmetric levels -8..7 around 0; the scale is rounded to fp16 first, so levels match the stored scale
        scale = (grouped.abs().amax(dim=-1) / 7.0).clamp(min=1e-7).half()
        levels = (torch.round(grouped / scale.float().unsqueeze(-1)).clamp(-8, 7) + 8).to(torch.uint8)
        levels = levels.reshape(rows, width)
        return cls(levels[:, 0::2] | (levels[:, 1::2] << 4), scale)

    @property
    def weight(self) -> torch.Tensor:
        return self.forward(torch.arange(self.num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.packed[ids].to(torch.int32)
        high = torch.div(rows, 16, rounding_mode="floor")
        levels = torch.stack([rows - high * 16, high], dim=-1).flatten(-2).to(torch.float32) - 8.0
        scale = self.scale[ids].to(torch.float32).unsqueeze(-1)  # [..., groups, 1]
        return (levels.unflatten(-1, (self.groups, self.group_size)) * scale).flatten(-2)
