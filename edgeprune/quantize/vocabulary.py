"""Vocabulary trimming: keep only the embedding rows of tokens the task's data uses.

The artifact then takes *new* ids; `VocabularyMap` turns the original tokenizer's ids into them
(tokens outside the kept set become the unknown token) and ships next to the artifact as JSON.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.serialization import write_json_atomic


@dataclass(frozen=True)
class VocabularyMap:
    original_size: int
    kept_ids: list[int]  # original ids in new-id order (sorted)
    unk_id: int  # original id of the unknown token

    @property
    def lookup(self) -> torch.Tensor:
        """[original_size] tensor: original id → new id (unknown → the unknown token's new id)."""
        table = torch.full((self.original_size,), self.kept_ids.index(self.unk_id), dtype=torch.long)
        table[torch.tensor(self.kept_ids)] = torch.arange(len(self.kept_ids))
        return table

    def apply(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lookup[ids]

    def save(self, path: Path) -> None:
        write_json_atomic(path, {"original_size": self.original_size, "unk_id": self.unk_id,
                                 "kept_ids": self.kept_ids,
                                 "usage": "new_id = position of the original id in kept_ids, else that of unk_id"})

    @classmethod
    def load(cls, path: Path) -> "VocabularyMap":
        data = json.loads(Path(path).read_text())
        return cls(data["original_size"], list(data["kept_ids"]), data["unk_id"])


def vocabulary_from(token_ids: torch.Tensor, special_ids: list[int], unk_id: int, original_size: int) -> VocabularyMap:
    """The map that keeps every id in `token_ids` plus the special tokens."""
    if unk_id not in special_ids:
        special_ids = [*special_ids, unk_id]
    kept = sorted(set(token_ids.unique().tolist()) | set(special_ids))
    if kept[-1] >= original_size:
        raise UserInputError(f"token id {kept[-1]} is outside the vocabulary of {original_size}")
    return VocabularyMap(original_size, kept, unk_id)


def trim_vocabulary(model: nn.Module, vocabulary: VocabularyMap) -> nn.Module:
    """Shrink the input embedding table of `model` (in place) to the kept rows; returns `model`."""
    encoder = next((m for m in model.modules() if hasattr(m, "get_input_embeddings")), None)
    if encoder is None:
        raise UserInputError(f"{type(model).__name__} has no input embeddings to trim")
    table = encoder.get_input_embeddings()
    if not isinstance(table, nn.Embedding) or table.num_embeddings != vocabulary.original_size:
        raise UserInputError(f"the input embedding has {getattr(table, 'num_embeddings', '?')} rows; the map "
                             f"expects {vocabulary.original_size}")
    kept = torch.tensor(vocabulary.kept_ids)
    trimmed = nn.Embedding(len(kept), table.embedding_dim, dtype=table.weight.dtype)
    trimmed.weight = nn.Parameter(table.weight.detach()[kept].clone(), requires_grad=table.weight.requires_grad)
    encoder.set_input_embeddings(trimmed)
    config = getattr(encoder, "config", None)
    if config is not None:
        config.vocab_size = len(kept)
        if getattr(config, "pad_token_id", None) is not None and config.pad_token_id in vocabulary.kept_ids:
            config.pad_token_id = vocabulary.kept_ids.index(config.pad_token_id)
    return model
