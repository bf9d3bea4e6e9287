"""What a runtime needs beyond example inputs to lower a module whose calls vary in shape and keep state: the
dynamic dimensions and the metadata the runtime's own runner reads from the file."""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProgramSpec:
    """`dynamic_shapes` in `torch.export`'s form, one entry per example input; `metadata` the constant methods
    written into the program (ExecuTorch's LLM runner reads `get_max_seq_len`, `get_max_context_len`,
    `get_bos_id`, `get_eos_ids`, `use_kv_cache`, `enable_dynamic_shape`, `get_vocab_size`: the names in its
    extension/llm/runner/constants.h)."""

    dynamic_shapes: tuple[Any, ...] | None = None
    metadata: dict[str, int | bool | list[int]] = field(default_factory=dict)
