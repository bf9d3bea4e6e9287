"""What text tasks share: the model folder's tokenizer, a max length checked against the model, shipping."""

import pickle
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
from edgeprune.tasks.compatibility import model_kind, read_config

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
        positions = getattr(read_config(self.model_path), "max_position_embeddings", None)
        return positions if isinstance(positions, int) and not isinstance(positions, bool) else None

    @cached_property
    def tokenizer(self):  # noqa: ANN201 - a transformers tokenizer
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        except Exception as error:  # tokenizers raises a bare Exception on a broken tokenizer.json
            message = " ".join(str(error).split())[:300]
            raise UserInputError(f"cannot load a tokenizer from {self.model_path} ({type(error).__name__}: "
                                 f"{message}); the model folder needs its tokenizer files (e.g. tokenizer.json)"
                                 ) from None
        if not callable(tokenizer) or len(tokenizer) <= len(set(tokenizer.all_special_ids)):
            # transformers builds a tokenizer of special tokens alone when the folder has no tokenizer files
            raise UserInputError(f"the model folder {self.model_path} has no tokenizer (no vocabulary beyond the "
                                 "special tokens); copy its tokenizer files (e.g. tokenizer.json) into it")
        return tokenizer

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
    from safetensors import SafetensorError
    from transformers import AutoConfig

    from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
    from edgeprune.models.io import load

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        if hasattr(config, KEPT_HEADS_CONFIG_KEY):
            model = load(path)  # pruned by edgeprune: per-layer head counts
        else:
            auto = getattr(transformers, auto_class)
            options = dict(dtype=torch.float32, local_files_only=True, attn_implementation="eager")
            try:
                model = auto.from_pretrained(path, **options, **kwargs)
            except TypeError as error:  # a family whose constructor lacks an option of BERT's (add_pooling_layer)
                if not kwargs or "unexpected keyword argument" not in str(error):
                    raise
                model = auto.from_pretrained(path, **options)
    except UserInputError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, EOFError, pickle.UnpicklingError, SafetensorError) as error:
        # a missing or cut-off weights file, tensors of the wrong shape, a broken pickle
        message = " ".join(str(error).split())
        message = message if len(message) <= 300 else message[:300] + "..."
        raise UserInputError(f"cannot load a model from {path}: {message or type(error).__name__}") from None
    adapter_for(model)  # fail early with the supported families
    return model.eval()


def model_architecture(path: Path) -> str:
    """The first architecture the folder's config names, or '' when it names none."""
    return model_kind(path).architecture
