"""A pruning plan: which of the dense model's heads each layer keeps. Serializable."""

from dataclasses import dataclass
from typing import Any

from edgeprune.errors import UserInputError
from edgeprune.serialization import json_codec


@json_codec
@dataclass(frozen=True)
class PruningPlan:
    num_heads: list[int]  # heads per layer in the dense model
    kept_heads: list[list[int]]  # per layer, the dense model's head indices that stay (sorted)
    criterion: str = ""
    strategy: str = ""

    def __post_init__(self) -> None:
        if len(self.num_heads) != len(self.kept_heads):
            raise UserInputError(
                f"plan has {len(self.num_heads)} layers of head counts but {len(self.kept_heads)} layers of kept heads"
            )
        for layer, (total, kept) in enumerate(zip(self.num_heads, self.kept_heads, strict=True)):
            if not kept:
                raise UserInputError(f"plan keeps no head in layer {layer}; every layer needs at least one")
            if any(h < 0 or h >= total for h in kept) or len(set(kept)) != len(kept):
                raise UserInputError(
                    f"plan layer {layer}: kept heads {kept} must be distinct indices in 0..{total - 1}")

    @property
    def removed_heads(self) -> dict[int, list[int]]:
        return {
            layer: [h for h in range(total) if h not in set(kept)]
            for layer, (total, kept) in enumerate(zip(self.num_heads, self.kept_heads, strict=True))
            if len(kept) < total
        }

    @property
    def heads_kept(self) -> int:
        return sum(len(k) for k in self.kept_heads)

    @property
    def heads_removed(self) -> int:
        return sum(self.num_heads) - self.heads_kept

    @property
    def fraction_removed(self) -> float:
        return self.heads_removed / sum(self.num_heads)

    @classmethod
    def dense(cls, num_heads: list[int]) -> "PruningPlan":
        return cls(list(num_heads), [list(range(n)) for n in num_heads], strategy="dense")

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_heads": list(self.num_heads),
            "kept_heads": [list(k) for k in self.kept_heads],
            "criterion": self.criterion,
            "strategy": self.strategy,
            "heads_removed": self.heads_removed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PruningPlan":
        return cls(list(data["num_heads"]), [list(k) for k in data["kept_heads"]],
                   data.get("criterion", ""), data.get("strategy", ""))
