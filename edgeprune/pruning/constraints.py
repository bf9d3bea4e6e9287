"""Constraints every selection strategy honours."""

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeprune.errors import UserInputError

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class Constraints:
    min_heads_per_layer: int = 1
    # kept heads per layer rounded up to a multiple of this (kernels that like aligned widths); 1 = off
    heads_multiple: int = 1
    # KV heads per layer for grouped-query attention; removals then snap to whole groups or equal per group
    kv_heads: tuple[int, ...] | None = None

    @classmethod
    def for_model(cls, model: "nn.Module", min_heads_per_layer: int = 1, heads_multiple: int = 1) -> "Constraints":
        """Constraints with the model's grouped-query layout filled in (when it has one)."""
        from edgeprune.models import adapter_for

        blocks = adapter_for(model).attention_blocks(model)
        grouped = any(b.num_kv_heads != b.num_heads for b in blocks)
        return cls(min_heads_per_layer, heads_multiple, tuple(b.num_kv_heads for b in blocks) if grouped else None)

    def __post_init__(self) -> None:
        if self.min_heads_per_layer < 1:
            raise UserInputError(f"min_heads_per_layer must be at least 1, got {self.min_heads_per_layer}")
        if self.heads_multiple < 1:
            raise UserInputError(f"heads_multiple must be at least 1, got {self.heads_multiple}")

    def kept_count(self, wanted: int, available: int) -> int:
        """How many heads a layer keeps when a strategy wants to keep `wanted` of `available`."""
        kept = max(wanted, self.min_heads_per_layer)
        kept = math.ceil(kept / self.heads_multiple) * self.heads_multiple
        return min(kept, available)

    def describe(self) -> str:
        gqa = f", kv_heads={list(self.kv_heads)}" if self.kv_heads else ""
        return f"min_heads_per_layer={self.min_heads_per_layer}, heads_multiple={self.heads_multiple}{gqa}"
