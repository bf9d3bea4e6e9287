"""Score-based selection strategies on the shared registry: scores + constraints + how much → a plan.

Each strategy module registers itself here (adding one is one module plus its test). Strategies that need the
model itself (iterative re-scoring, learned gates) are functions of their own, not members of this family.
"""

from collections.abc import Callable
from dataclasses import dataclass

from edgeprune.errors import UserInputError
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.plan import PruningPlan
from edgeprune.registry import Registry


@dataclass(frozen=True)
class SelectionAmount:
    """How much a strategy removes; each strategy reads the fields it names in `needs`."""

    remove: int | None = None  # heads removed in all (global-topk)
    remove_per_layer: int | list[int] | None = None  # heads removed from each layer (per-layer)
    threshold: float | None = None  # remove heads scoring below this (threshold) ...
    quantile: float | None = None  # ... or below this quantile of the scores (threshold)


@dataclass(frozen=True)
class SelectionStrategy:
    name: str
    needs: tuple[str, ...]  # SelectionAmount fields, at least one of which must be given
    meaning: str  # what the amount means, for the message when it is missing
    select: Callable[[HeadScores, SelectionAmount, Constraints], PruningPlan]

    def plan(self, scores: HeadScores, amount: SelectionAmount, constraints: Constraints | None = None) -> PruningPlan:
        if all(getattr(amount, field) is None for field in self.needs):
            flags = " or ".join(f"--{field.replace('_', '-')}" for field in self.needs)
            raise UserInputError(f"{self.name} needs {flags} ({self.meaning})")
        return self.select(scores, amount, constraints or Constraints())


STRATEGIES: Registry[SelectionStrategy] = Registry("selection strategy")


def register_strategy(name: str, needs: tuple[str, ...], meaning: str) -> Callable:
    """Decorator for `select(scores, amount, constraints) -> PruningPlan`, registered as strategy `name`."""
    def add(select: Callable[[HeadScores, SelectionAmount, Constraints], PruningPlan]) -> Callable:
        STRATEGIES.register(name)(SelectionStrategy(name, needs, meaning, select))
        return select

    return add


def plan_heads(strategy: str, scores: HeadScores, amount: SelectionAmount,
               constraints: Constraints | None = None) -> PruningPlan:
    """The plan `strategy` (a name from STRATEGIES) makes from `scores`."""
    return STRATEGIES.get(strategy).plan(scores, amount, constraints)
