"""Plain text for causal-LM recovery: a seeded split by document, fixed-length token blocks, perplexity.

Documents (not blocks) are split into calibration, validation and held-out sets, so no held-out text is
ever seen by scoring or recovery. Each split's documents are tokenized, joined with an end-of-text token
and cut into blocks of `block_size` tokens (the tail that does not fill a block is dropped), the usual way
language-model perplexity is measured on a corpus.
"""

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.importance.base import Batch
from edgeprune.recovery.data import DistillData
from edgeprune.recovery.losses import forward

TEXT_SPLITS = ("calibration", "validation", "held_out")


def split_documents(count: int, seed: int, validation: float = 0.1, held_out: float = 0.3) -> dict[str, list[int]]:
    """Document indices per split, shuffled with `seed`; calibration takes what validation and held-out leave."""
    for name, share in (("validation", validation), ("held_out", held_out)):
        if not 0 < share < 1:
            raise UserInputError(f"the {name} share must be between 0 and 1 (exclusive), got {share}")
    if validation + held_out >= 1:
        raise UserInputError(f"validation ({validation}) and held-out ({held_out}) shares leave no calibration text")
    if count < 3:
        raise UserInputError(f"need at least 3 documents to split into calibration, validation and held-out; "
                             f"got {count}")
    order = list(range(count))
    random.Random(seed).shuffle(order)
    n_held_out = max(1, round(count * held_out))
    n_validation = max(1, min(round(count * validation), count - n_held_out - 1))
    return {"held_out": sorted(order[:n_held_out]),
            "validation": sorted(order[n_held_out:n_held_out + n_validation]),
            "calibration": sorted(order[n_held_out + n_validation:])}


def token_blocks(token_lists: Sequence[Sequence[int]], block_size: int, separator: int | None = None) -> torch.Tensor:
    """[blocks, block_size] token ids: the lists joined (with `separator` after each one) and cut into blocks."""
    if block_size < 2:
        raise UserInputError(f"block_size must be at least 2 tokens (a prediction needs a context), got {block_size}")
    stream: list[int] = []
    for tokens in token_lists:
        stream.extend(int(t) for t in tokens)
        if separator is not None:
            stream.append(separator)
    blocks = len(stream) // block_size
    return torch.tensor(stream[:blocks * block_size], dtype=torch.long).view(blocks, block_size)


@dataclass(frozen=True)
class TextCorpus:
    """Token blocks of a text corpus per split, and which documents went where."""

    blocks: dict[str, torch.Tensor]  # split -> [blocks, block_size] token ids
    documents: dict[str, list[int]]  # split -> indices of the documents it holds
    block_size: int

    @classmethod
    def from_texts(cls, texts: Sequence[str], encode: Callable[[str], Sequence[int]], block_size: int = 128,
                   seed: int = 0, validation: float = 0.1, held_out: float = 0.3,
                   separator: int | None = None) -> "TextCorpus":
        """Split `texts` by document with `seed`, tokenize each with `encode` and cut each split into blocks.

        `separator` (usually the end-of-text token id) goes between documents.
        """
        documents = split_documents(len(texts), seed, validation, held_out)
        blocks = {}
        for split, indices in documents.items():
            blocks[split] = token_blocks([encode(texts[i]) for i in indices], block_size, separator)
            if len(blocks[split]) == 0:
                raise UserInputError(f"the {split} split ({len(indices)} documents) holds fewer than {block_size} "
                                     "tokens; use more text or a shorter block_size")
        return cls(blocks, documents, block_size)

    def sizes(self) -> dict[str, int]:
        """Blocks per split."""
        return {split: len(blocks) for split, blocks in self.blocks.items()}

    def batches(self, split: str, batch_size: int, limit: int | None = None) -> Iterator[Batch]:
        """The first `limit` blocks of `split` in order, `batch_size` at a time (no padding: blocks are full)."""
        if split not in self.blocks:
            raise UserInputError(f"unknown split {split!r}; choose from {', '.join(TEXT_SPLITS)}")
        if batch_size < 1:
            raise UserInputError(f"batch_size must be at least 1, got {batch_size}")
        blocks = self.blocks[split][:limit]
        for start in range(0, len(blocks), batch_size):
            ids = blocks[start:start + batch_size]
            yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def distill_data(self, batch_size: int = 8, seed: int = 0, train_limit: int | None = None,
                     validation_limit: int | None = None) -> DistillData:
        """Train on calibration blocks (shuffled per epoch with `seed`), validate on validation blocks; the
        held-out blocks are never read."""
        if batch_size < 1:
            raise UserInputError(f"batch_size must be at least 1, got {batch_size}")
        calibration = self.blocks["calibration"][:train_limit]

        def train(epoch: int) -> Iterator[Batch]:
            order = torch.randperm(len(calibration), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
            for start in range(0, len(order), batch_size):
                ids = calibration[order[start:start + batch_size]]
                yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

        return DistillData(train, lambda: self.batches("validation", batch_size, validation_limit))


@torch.no_grad()
def perplexity(model: nn.Module, batches: Iterator[Batch] | Sequence[Batch]) -> float:
    """exp of the mean next-token cross-entropy over every predicted real token of `batches`."""
    was_training = model.training
    model.eval()
    total = tokens = 0.0
    try:
        for batch in batches:
            ids = batch["input_ids"]
            mask = batch.get("attention_mask")
            mask = torch.ones_like(ids) if mask is None else mask
            logits = forward(model, {"input_ids": ids, "attention_mask": mask}).logits
            valid = (mask[:, 1:] * mask[:, :-1]).bool()
            losses = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
            total += float(losses[valid.flatten()].sum())
            tokens += int(valid.sum())
    finally:
        model.train(was_training)
    if tokens == 0:
        raise ValueError("no tokens to score: the batches were empty")
    return math.exp(total / tokens)
