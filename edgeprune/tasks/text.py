"""What text tasks share: the model folder's tokenizer, a max length checked against the model, shipping."""

import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.tasks.base import Task

if TYPE_CHECKING:
    from edgeprune.quantize.vocabulary import VocabularyMap

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "sentencepiece.bpe.model", "spiece.model", "added_tokens.json")


@dataclass
class TextTask(Task):
    max_length: int = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 8:
            raise UserInputError(f"max length must be a whole number of at least 8 tokens, got {self.max_length!r}")
        positions = self.model_positions()
        if positions is not None and self.max_length > positions:
            raise UserInputError(f"max length {self.max_length} is beyond the {positions} positions of the model in "
                                 f"{self.model_path}; use --max-length {positions} or less")

    def model_positions(self) -> int | None:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(self.model_path)
        except (OSError, ValueError) as error:
            raise UserInputError(f"cannot read the model config in {self.model_path}: {error}") from None
        return getattr(config, "max_position_embeddings", None)

    @cached_property
    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(self.model_path)
        except (OSError, ValueError, TypeError) as error:
            raise UserInputError(f"cannot load a tokenizer from {self.model_path} ({error}); the model folder needs "
                                 "its tokenizer files (e.g. tokenizer.json)") from None

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        tokens = self.tokenizer(texts, padding="max_length", truncation=True, max_length=self.max_length,
                                return_tensors="pt")
        return {"input_ids": tokens["input_ids"].long(), "attention_mask": tokens["attention_mask"].long()}

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("input_ids", "attention_mask")

    def vocabulary(self) -> "VocabularyMap":
        """Tokens of the calibration and validation splits plus the tokenizer's special tokens."""
        from edgeprune.quantize.vocabulary import vocabulary_from

        seen = torch.cat([self.encode(split)["input_ids"].flatten() for split in ("calibration", "validation")])
        return vocabulary_from(seen, list(self.tokenizer.all_special_ids), self.tokenizer.unk_token_id,
                               len(self.tokenizer))

    def ship(self, folder: Path) -> list[str]:
        written = []
        for name in TOKENIZER_FILES:
            source = self.model_path / name
            if source.is_file():
                shutil.copy(source, folder / name)
                written.append(name)
        return written

    def options_key(self) -> str:
        return f"max_length={self.max_length}"

    def load_transformer(self, auto_class: str, **kwargs: object) -> nn.Module:
        """The model folder through `auto_class`, or through edgeprune.load when edgeprune pruned it."""
        return load_model_folder(self.model_path, auto_class, **kwargs)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "max_length": self.max_length}


def load_model_folder(path: Path, auto_class: str, **kwargs: object) -> nn.Module:
    import transformers
    from transformers import AutoConfig

    from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
    from edgeprune.models.io import load

    try:
        config = AutoConfig.from_pretrained(path)
        if hasattr(config, KEPT_HEADS_CONFIG_KEY):
            model = load(path)  # pruned by edgeprune: per-layer head counts
        else:
            model = getattr(transformers, auto_class).from_pretrained(path, dtype=torch.float32,
                                                                      attn_implementation="eager", **kwargs)
    except (OSError, ValueError, KeyError) as error:
        raise UserInputError(f"cannot load a model from {path}: {error}") from None
    adapter_for(model)  # fail early with the supported families
    return model.eval()


def model_architecture(path: Path) -> str:
    """The first architecture the folder's config names, or '' when it names none."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise UserInputError(f"cannot read the model config in {path}: {error}") from None
    return (getattr(config, "architectures", None) or [""])[0]
