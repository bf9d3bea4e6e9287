"""Causal language modelling: perplexity on held-out text, split by document before it is cut into blocks."""

import math
import time
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.classifier import CausalLMLogits
from edgeprune.tasks.base import Batch, Quality, Split, Teacher
from edgeprune.tasks.compatibility import DECODER
from edgeprune.tasks.metrics import next_token_nll
from edgeprune.tasks.text import TextTask


@dataclass
class CausalLMTask(TextTask):
    """Each split's documents are tokenized, joined with the end-of-text token and cut into blocks of
    `max_length` tokens (the artifact's fixed input); a trailing partial block is dropped."""

    kind = "causal-lm"
    metric = "perplexity"
    higher_is_better = False
    model_kinds = (DECODER,)

    @property
    def labelled(self) -> bool:
        return False

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("input_ids",)

    @cached_property
    def _encoded(self) -> dict[str, Batch]:
        separator = self.tokenizer.eos_token_id
        encoded = {}
        for split in ("calibration", "validation", "test"):
            stream: list[int] = []
            for item in self.split_items(split):
                stream += self.tokenizer(item.text, add_special_tokens=False)["input_ids"]
                if separator is not None:
                    stream.append(separator)
            blocks = len(stream) // self.max_length
            if blocks == 0:
                raise UserInputError(f"the {split} split holds {len(stream)} tokens, less than one block of "
                                     f"--max-length {self.max_length}; add text or lower --max-length")
            ids = torch.tensor(stream[:blocks * self.max_length], dtype=torch.long).reshape(blocks, self.max_length)
            encoded[split] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        return encoded

    def encode(self, split: Split) -> Batch:
        return self._encoded[split]

    def teacher(self) -> Teacher:
        started = time.perf_counter()
        model = CausalLMLogits(self.load_transformer("AutoModelForCausalLM")).eval()
        return Teacher(model, self.quality(model, "validation"), self.quality(model, "test"),
                       time.perf_counter() - started, cached=False)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = model(batch["input_ids"])[0]
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["input_ids"][:, 1:].reshape(-1))

    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        ids = self.encode(split)["input_ids"]
        total, tokens = 0.0, 0
        for index, logits in enumerate(outputs):
            nll, count = next_token_nll(logits.reshape(1, self.max_length, -1), ids[index:index + 1])
            total += nll
            tokens += count
        mean_nll = total / max(tokens, 1)
        return Quality("perplexity", math.exp(mean_nll), False, split, len(outputs),
                       {"mean_nll": mean_nll, "tokens": tokens, "blocks": len(outputs)})

    def vocabulary(self) -> None:
        return None  # the output layer predicts every token; trimming the input table alone would break tied weights
