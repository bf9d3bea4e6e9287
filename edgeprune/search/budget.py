"""Budgets a fitted artifact must meet."""

import math
from dataclasses import dataclass

from edgeprune.errors import UserInputError


@dataclass(frozen=True)
class Budget:
    max_mb: float | None = None  # artifact file size, in MB (10^6 bytes)

    def __post_init__(self) -> None:
        if self.max_mb is not None:
            is_number = isinstance(self.max_mb, int | float) and not isinstance(self.max_mb, bool)
            if not is_number or not math.isfinite(self.max_mb):
                raise UserInputError(f"max_mb must be a positive number of megabytes, got {self.max_mb!r}")
            if self.max_mb <= 0:
                raise UserInputError(f"max_mb must be positive, got {self.max_mb}")

    def size_fits(self, file_bytes: int) -> bool:
        return self.max_mb is None or file_bytes <= self.max_mb * 1e6
