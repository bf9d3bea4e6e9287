"""Constraints every selection strategy honours."""

import math
from dataclasses import dataclass

from edgeprune.errors import UserInputError


@dataclass(frozen=True)
class Constraints:
    min_heads_per_layer: int = 1
    # kept heads per layer rounded up to a multiple of this (kernels that like aligned widths); 1 = off
    heads_multiple: int = 1

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
        return f"min_heads_per_layer={self.min_heads_per_layer}, heads_multiple={self.heads_multiple}"
