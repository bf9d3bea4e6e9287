"""Causal language modelling: perplexity on held-out text, split by document before it is cut into blocks.

The artifact is a KV-cached generator (`CausalLMLogits` with a context): `forward(input_ids [1, S],
cache_position [S])`. Through the runtime, each block is prefilled up to its last `DECODE_TOKENS` tokens (on the
validation split `VALIDATION_DECODE_TOKENS`) and those are decoded one at a time against the cache, so the
perplexity a fit reports is the shipped program's, prefill and decode both."""

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.cache import discard, read_entry, write_entry
from edgeprune.errors import UserInputError
from edgeprune.generation.fast_attention import ATTENTION_PATHS, custom_ops_available
from edgeprune.models.classifier import CausalLMLogits
from edgeprune.tasks.base import Batch, Quality, RuntimeRun, Split, Teacher, split_items
from edgeprune.tasks.compatibility import DECODER
from edgeprune.tasks.metrics import next_token_nll
from edgeprune.tasks.text import TextTask


class PerplexityTally:
    """Summed next-token NLL over blocks, to a perplexity Quality: each block's vocabulary-wide logits (SmolLM2:
    25 MB a block of 128) are reduced as they come, none kept (`Task.quality_tally`)."""

    def __init__(self, task: object, split: Split) -> None:
        self.split, self.total, self.tokens, self.blocks = split, 0.0, 0, 0

    def add(self, logits: torch.Tensor, batch: Batch) -> None:
        input_ids = batch["input_ids"]
        nll, count = next_token_nll(logits.reshape(*input_ids.shape, -1), input_ids)
        self.total, self.tokens, self.blocks = self.total + nll, self.tokens + count, self.blocks + len(input_ids)

    def quality(self) -> Quality:
        mean_nll = self.total / max(self.tokens, 1)
        return Quality("perplexity", math.exp(mean_nll), False, self.split, self.blocks,
                       {"mean_nll": mean_nll, "tokens": self.tokens, "blocks": self.blocks})


DEFAULT_CONTEXT = 512  # cache slots when --context is not given (at least the block length, at most the positions)
DECODE_TOKENS = 16  # of every block, decoded token by token through the runtime (the rest is prefilled)
# on the validation split, which the search ranks candidates by: the same perplexity to four decimals on SmolLM2's
# int4-decoder program of 2026-12-04 (symmetric blocks: 56.9304 both) in 38 s instead of 97 s; the reported test figure
# keeps DECODE_TOKENS
VALIDATION_DECODE_TOKENS = 4
TEACHER_CACHE_VERSION = 1  # of the teacher-perplexity entries in the cache (teachers/NAME-KEY-CONTEXT-ATTENTION.json)
TEACHER_PRODUCERS = ("torch", "transformers")  # whose versions a teacher entry's cache record must match


@dataclass
class CausalLMTask(TextTask):
    """Each split's documents are tokenized, joined with the end-of-text token and cut into blocks of
    `max_length` tokens (the artifact's fixed input); a trailing partial block is dropped."""

    kind = "causal-lm"
    metric = "perplexity"
    higher_is_better = False
    model_kinds = (DECODER,)
    labelled: ClassVar[bool] = False
    # a decoder recovers as SmolLM2 was measured to (docs/FINDINGS.md, "SmolLM2-135M: a quarter of the heads
    # removed"): batches of 2 blocks, KL to the teacher at temperature 1 without the next-token loss; an encoder's 16
    # blocks at 2e-5 made a step 8× as long (9.5 s on SmolLM2 here) for less per step. Learning rate 3e-4: SmolLM2
    # recovered for 150 steps on the grid kept validation perplexity 44.01 with two layers removed (2e-4: 44.48,
    # 4e-4: 43.79) and 42.69 with one (2e-4: 42.69; 4e-4: 43.07, its recovery overshot after step 50; docs/FINDINGS.md,
    # 2026-12-07). Validation passes read 16 blocks: the teacher's logits of a whole split do not fit what is kept
    # of them
    recovery_batch_size = 2
    recovery_settings = MappingProxyType({"learning_rate": 3e-4, "temperature": 1.0, "task_weight": 0.0})
    recovery_validation_limit = 16
    context: int | None = None  # KV-cache slots of the artifact; None: DEFAULT_CONTEXT within the model's limits
    max_blocks: int | None = None  # blocks kept per split (the first, in the seeded split's order); None: all
    # calibration blocks recovery trains on (`recovery_examples`): the first `max_blocks` of them are the calibration
    # split scoring reads; None: those alone. SmolLM2 distilled on 300 distinct blocks kept 1.8 % less perplexity
    # than on 96 seen three times over (docs/FINDINGS.md, 2026-12-07)
    recovery_blocks: int | None = None
    # the program's attention (generation/fast_attention.py): "portable", "fast", or "auto": fast where this
    # process loads ExecuTorch's LLM kernels, and portable for a device whose native runner times it (fit decides)
    attention: str = "auto"
    # the prompt whose time to first token --max-ttft-ms limits (one prefill call); None: a whole block (max_length)
    prompt_tokens: int | None = None
    quality_tally: ClassVar[Callable[..., PerplexityTally]] = PerplexityTally
    # SmolLM2's validation estimate: 1.7 GB peak at 8 blocks a forward, 3.5 GB at 32, in the same 19-21 s
    quality_batch_size: ClassVar[int] = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_blocks", "recovery_blocks"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UserInputError(f"{name} must be a whole number of blocks, at least 1, or None, got {value!r}")
        if self.prompt_tokens is not None and (isinstance(self.prompt_tokens, bool)
                                               or not isinstance(self.prompt_tokens, int)
                                               or not 1 <= self.prompt_tokens <= self.max_length):
            raise UserInputError(f"--prompt-tokens must be a whole number of tokens from 1 to --max-length "
                                 f"{self.max_length} (the program's prefill length), got {self.prompt_tokens!r}")
        if self.context is not None and (isinstance(self.context, bool) or not isinstance(self.context, int)
                                         or self.context < self.max_length):
            raise UserInputError(f"--context must be a whole number of tokens at least --max-length "
                                 f"{self.max_length} (a block is prefilled into the cache), got {self.context!r}")
        if self.attention not in ("auto", *ATTENTION_PATHS):
            raise UserInputError(f"--attention must be auto, {' or '.join(ATTENTION_PATHS)}, got {self.attention!r}")
        positions = self.model_positions()
        if self.context is not None and positions is not None and self.context > positions:
            raise UserInputError(f"--context {self.context} is beyond the {positions} positions of the model in "
                                 f"{self.model_path}; use --context {positions} or less")

    @property
    def cache_length(self) -> int:
        """The context the artifact's KV cache holds."""
        if self.context is not None:
            return self.context
        positions = self.model_positions() or DEFAULT_CONTEXT
        return max(self.max_length, min(DEFAULT_CONTEXT, positions))

    @property
    def program_attention(self) -> str:
        """The attention path the artifact is built with: `attention`, "auto" resolved for this process."""
        if self.attention != "auto":
            return self.attention
        return "fast" if custom_ops_available() else "portable"

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("input_ids",)

    @cached_property
    def _encoded(self) -> dict[str, Batch]:
        separator = self.tokenizer.eos_token_id
        encoded = {}
        for split in ("calibration", "validation", "test"):
            stream: list[int] = []
            for item in split_items(self, split):
                stream += self.tokenizer(item.text, add_special_tokens=False)["input_ids"]
                if separator is not None:
                    stream.append(separator)
            available = len(stream) // self.max_length
            if available == 0:
                raise UserInputError(f"the {split} split holds {len(stream)} tokens, less than one block of "
                                     f"--max-length {self.max_length}; add text or lower --max-length")
            caps = {split: self.max_blocks}
            if split == "calibration" and self.recovery_blocks is not None:
                caps["recovery"] = self.recovery_blocks  # the calibration text recovery trains on
            for name, cap in caps.items():
                blocks = available if cap is None else min(available, cap)
                ids = torch.tensor(stream[:blocks * self.max_length], dtype=torch.long).reshape(blocks, self.max_length)
                encoded[name] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        return encoded

    def encode(self, split: Split) -> Batch:
        return self._encoded[split]

    def recovery_examples(self) -> Batch:
        return self._encoded.get("recovery") or self.encode("calibration")

    @property
    def artifact_input_names(self) -> tuple[str, ...]:
        return ("input_ids", "cache_position")

    def example_inputs(self, split: Split = "validation", count: int = 1) -> list[tuple[torch.Tensor, ...]]:
        """A block at batch 1 and its positions 0..max_length-1: a prefill of the whole block into the cache."""
        positions = torch.arange(self.max_length)
        return [(ids,) + (positions,) for (ids,) in super().example_inputs(split, count)]

    def decode_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step as fit times it: a token at depth `max_length` (after a prompt of one block), or at the
        cache's last slot when the context holds no more."""
        depth = min(self.max_length, self.cache_length - 1)
        return self.example_inputs("validation", 1)[0][0][:, :1], torch.tensor([depth])

    def ttft_inputs(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The prefill of a `prompt_tokens` prompt, timed for the time to first token; None when the prompt is a
        whole block, whose prefill is the benchmarked forward itself."""
        if self.prompt_tokens is None or self.prompt_tokens == self.max_length:
            return None
        ids, positions = self.example_inputs("validation", 1)[0]
        return ids[:, :self.prompt_tokens], positions[:self.prompt_tokens]

    def dense_model(self) -> nn.Module:
        return CausalLMLogits(self.load_transformer("AutoModelForCausalLM"), self.cache_length,
                              self.program_attention).eval()

    def teacher(self) -> Teacher:
        """The dense model and its perplexity on both splits. The perplexities (SmolLM2: 72 s of a fit on 2 cores)
        are kept in the teacher cache under the model's and data's key: the model is loaded each time."""
        started = time.perf_counter()
        model = self.dense_model()
        cache_file = (self.cache_dir / "teachers" /
                      f"{self.name}-{self.cache_key()}-{self.cache_length}-{self.program_attention}.json")
        saved = read_teacher_qualities(cache_file, self.progress.warn)
        if saved is not None:
            self.progress.note(f"teacher perplexity loaded from cache {cache_file}")
            return Teacher(model, *saved, time.perf_counter() - started, cached=True)
        validation, test = self.quality(model, "validation"), self.quality(model, "test")
        write_teacher_qualities(cache_file, validation, test)
        return Teacher(model, validation, test, time.perf_counter() - started, cached=False)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = model(batch["input_ids"])[0]
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["input_ids"][:, 1:].reshape(-1))

    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        ids = self.encode(split)["input_ids"]
        tally = PerplexityTally(self, split)
        for index, logits in enumerate(outputs):
            tally.add(logits, {"input_ids": ids[index:index + 1]})
        return tally.quality()

    def runtime_quality(self, run: RuntimeRun, split: Split = "test",
                        map_inputs: Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]] | None = None
                        ) -> Quality:
        """Perplexity through the generator: every block prefilled up to its last DECODE_TOKENS tokens (on the
        validation split VALIDATION_DECODE_TOKENS), those decoded one at a time, each block starting again at
        position 0 (the cache is overwritten, never reset)."""
        ids = self.encode(split)["input_ids"]
        prefill = prefill_length(self.max_length, split)
        tally = PerplexityTally(self, split)
        with self.progress.task(f"{self.metric} through the runtime on the {split} split (prefill {prefill}, "
                                f"decode {self.max_length - prefill})", len(ids)) as bar:
            for block in ids.split(1):
                tally.add(generated_logits(run, block, prefill), {"input_ids": block})
                bar.advance(1)
        return tally.quality()

    def options_key(self) -> str:
        return (f"{super().options_key()},context={self.cache_length},attention={self.program_attention},"
                f"blocks={self.max_blocks}/{self.recovery_blocks}")

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "context": self.cache_length, "attention": self.program_attention,
                "prompt_tokens": self.prompt_tokens or self.max_length, "max_blocks": self.max_blocks,
                "recovery_blocks": self.recovery_blocks}

    def vocabulary(self) -> None:
        return None  # the output layer predicts every token; trimming the input table alone would break tied weights


def prefill_length(block_length: int, split: Split) -> int:
    """How much of each block `CausalLMTask.runtime_quality` prefills; the rest (DECODE_TOKENS, on the validation
    split VALIDATION_DECODE_TOKENS, at most half the block) it decodes a token at a time."""
    decoded = VALIDATION_DECODE_TOKENS if split == "validation" else DECODE_TOKENS
    return block_length - min(decoded, block_length // 2)


def generated_logits(run: RuntimeRun, block: torch.Tensor, prefill: int) -> torch.Tensor:
    """A block's logits through a generator program: prefilled up to `prefill` from position 0, the rest decoded a
    token at a time through the program's cache."""
    steps = [run(block[:, :prefill], torch.arange(prefill))[0]]
    steps += [run(block[:, t:t + 1], torch.tensor([t]))[0] for t in range(prefill, block.shape[1])]
    return torch.cat(steps, dim=1)


def read_teacher_qualities(cache_file: Path, warn: Callable[[str], None]) -> tuple[Quality, Quality] | None:
    """The teacher's validation and test quality measured before, from the teacher cache; None when it holds none,
    or a damaged or outdated one (removed, with one warning through `warn`: measured again)."""
    data = read_entry(cache_file, warn, TEACHER_PRODUCERS)
    if data is None:
        return None
    try:
        entry = json.loads(data)
        if entry.get("version") != TEACHER_CACHE_VERSION:
            raise ValueError(f"version {entry.get('version')!r}, not {TEACHER_CACHE_VERSION}")
        return Quality(**entry["validation"]), Quality(**entry["test"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        discard(cache_file, f"not a teacher entry: {type(error).__name__}: {error}", warn)
        return None


def write_teacher_qualities(cache_file: Path, validation: Quality, test: Quality) -> None:
    entry = {"version": TEACHER_CACHE_VERSION, "validation": asdict(validation), "test": asdict(test)}
    write_entry(cache_file, json.dumps(entry).encode(), TEACHER_PRODUCERS)
