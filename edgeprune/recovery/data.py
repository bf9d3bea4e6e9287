"""The data a distillation run reads: training batches per epoch and validation batches."""

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from edgeprune.importance.base import Batch

if TYPE_CHECKING:
    from edgeprune.tasks.base import Task


@dataclass(frozen=True)
class DistillData:
    """`train(epoch)` yields one epoch of training batches; `validation()` the early-stopping batches.

    Both are called afresh each time, so a run can be repeated and gives the same batches.
    """

    train: Callable[[int], Iterable[Batch]]
    validation: Callable[[], Iterable[Batch]]

    @classmethod
    def from_batches(cls, train: Sequence[Batch], validation: Sequence[Batch]) -> "DistillData":
        """Fixed lists of batches (the same order every epoch)."""
        train, validation = list(train), list(validation)
        return cls(lambda _epoch: iter(train), lambda: iter(validation))

    @classmethod
    def from_task(cls, task: "Task", batch_size: int = 16, seed: int = 0,
                  train_limit: int | None = None, validation_limit: int | None = None) -> "DistillData":
        """Train on the task's calibration split (`Task.recovery_examples`), shuffled per epoch with `seed`;
        validate on its validation split. The test split is never read. Works for labelled and unlabelled tasks
        (causal-LM blocks)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")

        def train(epoch: int) -> Iterator[Batch]:
            data = task.recovery_examples()
            total = len(data["input_ids"])
            count = total if train_limit is None else min(train_limit, total)
            generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
            order = torch.randperm(count, generator=generator)
            for start in range(0, count, batch_size):
                index = order[start:start + batch_size]
                yield {k: v[:count][index] for k, v in data.items()}

        def validation() -> Iterator[Batch]:
            return task.batches("validation", batch_size, limit=validation_limit)

        return cls(train, validation)

    def scoring_batches(self, limit: int | None = None) -> Callable[[], Iterable[Batch]]:
        """Training batches of epoch 0 (at most `limit` batches), for importance scoring."""

        def batches() -> Iterator[Batch]:
            for i, batch in enumerate(self.train(0)):
                if limit is not None and i >= limit:
                    return
                yield batch

        return batches
