"""A decoder as a LiteRT generator: `prefill` and `decode` signatures with the KV cache as explicit state.

LiteRT has no buffers a program keeps between calls, so the caller holds the cache: one `k_cache_L` and `v_cache_L`
tensor `[1, kv_heads_L, context, head_dim_L]` per layer, each sized from that layer's own weights (a pruned layer
keeps a smaller cache), goes into every call, and the call returns, beside the logits, the keys and values of its
own tokens, `k_new_L` and `v_new_L` `[1, kv_heads_L, S, head_dim_L]`, which the caller writes into its cache at
`input_pos[0]`. litert-torch's generative layout returns the whole cache instead; through the interpreter's Python
API copying it out was most of a decode step (SmolLM2 at context 512: 23.6 MB a call; docs/FINDINGS.md). Inside the
call the cache is only read: attention scores the cache's slots before `input_pos[0]` and the call's own tokens as
two tensors never joined (`grouped_attention.split_attention`). Writing the new rows into the cache inside the
graph, as litert-torch's `dynamic_update_slice` does, copied the whole cache every call (a fifth of a SmolLM2
decode step). The model is the Hugging Face one as it is, not re-authored in litert-torch's layers, which read one
global head count.

`decode` is converted first, so that it is the interpreter's first subgraph: an app keeps the cache in decode's
own input tensors, writes a step's rows there through the interpreter's `tensor()` views and runs `invoke()`,
with no copy of the cache in or out (`edgeprune.bench.litert_generate.CachedGenerator`, which every loader here
and on a device uses).

Signatures have static shapes: `prefill` takes exactly `max_seq_len` tokens and `decode` one. A shorter prompt is
padded; the padding's keys are written past the prompt, where the mask hides them until the next tokens overwrite
them. A chunk whose padding would run past the cache's end is decoded one token at a time instead.

The generator's facts (the keys of ExecuTorch's LLM runner metadata: `get_max_seq_len`, `get_max_context_len`,
`get_eos_ids`, `use_kv_cache`, ...) are written into the flatbuffer's metadata table as JSON under
METADATA_NAME, where edgeprune's loaders and `inspect` read them.
"""

import json
import mmap
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.bench.litert_generate import CachedGenerator, new_rows
from edgeprune.errors import UserInputError
from edgeprune.generation import CacheLayout
from edgeprune.generation.grouped_attention import CacheAndNew, grouped_attention_in
from edgeprune.generation.program import ProgramSpec
from edgeprune.quantize.fused_projections import projections_fused

METADATA_NAME = "edgeprune.generator"
PREFILL, DECODE = "prefill", "decode"


def cache_names(layers: int) -> list[str]:
    """The cache tensors' names in signature inputs, layer by layer."""
    return [f"{kind}_cache_{layer}" for layer in range(layers) for kind in ("k", "v")]


class ExplicitKVCache:
    """The cache of one call, read only: `update` hands a layer's attention the cache passed in and the call's own
    keys and values side by side (`CacheAndNew`, which `grouped_attention` attends over without joining them) and
    keeps the new ones as that layer's outputs. Duck-types the method of transformers' `Cache` attention layers
    call."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.tensors = tensors  # k_0, v_0, k_1, v_1, ...
        self.new_rows: list[torch.Tensor] = list(tensors)  # this call's keys and values, k_0, v_0, ...

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: object, **kwargs: object) -> tuple[CacheAndNew, CacheAndNew]:
        keys, values = self.tensors[2 * layer_idx], self.tensors[2 * layer_idx + 1]
        key_states, value_states = key_states.to(keys.dtype), value_states.to(values.dtype)
        self.new_rows[2 * layer_idx], self.new_rows[2 * layer_idx + 1] = key_states, value_states
        return CacheAndNew(keys, key_states), CacheAndNew(values, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:  # noqa: ARG002 - Cache's signature
        return 0  # positions always come from input_pos


class SignatureGenerator(nn.Module):
    """`forward(input_ids [1, S], input_pos [S], k_cache_0, v_cache_0, ...)` → `{"logits": [1, S, vocab],
    "k_new_0": [1, kv_heads_0, S, head_dim_0], ...}`: the module both signatures are converted from (S =
    max_seq_len and 1)."""

    def __init__(self, model: nn.Module, context: int) -> None:
        super().__init__()
        self.model = model
        self.context = context

    def forward(self, input_ids: torch.Tensor, input_pos: torch.Tensor,
                **caches: torch.Tensor) -> dict[str, torch.Tensor]:
        names = cache_names(len(caches) // 2)
        cache = ExplicitKVCache([caches[name] for name in names])
        # [S, context + S]: a query sees the cache's slots before this call's first token, and its own and earlier
        # tokens of this call
        slots, tokens = torch.arange(self.context), torch.arange(input_ids.shape[1])
        visible = torch.cat([(slots[None, :] < input_pos[:1, None]).expand(len(tokens), -1),
                             tokens[None, :] <= tokens[:, None]], dim=1)
        mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)[None, None]
        with grouped_attention_in(self.model):
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=input_pos[None], cache=cache,
                                use_cache=True).logits
        return {"logits": logits, **{new_rows(name): rows for name, rows in zip(names, cache.new_rows,
                                                                                   strict=True)}}


def empty_caches(layout: CacheLayout) -> dict[str, torch.Tensor]:
    caches = {}
    for layer, (heads, size) in enumerate(zip(layout.kv_heads, layout.head_dim, strict=True)):
        for kind in ("k", "v"):
            caches[f"{kind}_cache_{layer}"] = torch.zeros(1, heads, layout.context, size)
    return caches


def convert_generator(module: nn.Module, example_inputs: tuple[torch.Tensor, ...], path: Path) -> ProgramSpec:
    """Convert `module` (a `CausalLMLogits` with a context) to a float `.tflite` at `path` with a `prefill` signature
    of the example's length and a one-token `decode`; returns what the generator's metadata says."""
    import litert_torch

    spec = module.program_spec(example_inputs)
    layout = CacheLayout.of(module.model, module.context)
    prefill = int(example_inputs[0].shape[1])
    generator = SignatureGenerator(module.model, module.context).eval()
    ids = example_inputs[0]
    # q/k/v and gate/up converted as one linear each (fewer ops a step), the caller's linears back afterwards
    with torch.no_grad(), projections_fused(module.model):
        generator.requires_grad_(False)
        # decode first: it becomes the interpreter's first subgraph, whose input tensors an app reaches with the
        # interpreter's public `tensor()` views and runs with `invoke()`, so the cache stays in them between steps
        converter = litert_torch.signature(DECODE, generator, sample_kwargs={
            "input_ids": ids[:, :1], "input_pos": torch.tensor([0]), **empty_caches(layout)})
        converter = converter.signature(PREFILL, generator, sample_kwargs={
            "input_ids": ids, "input_pos": torch.arange(prefill), **empty_caches(layout)})
        converter.convert().export(str(path))
    # the portable path: LiteRT attends with its own ops over the explicit cache (no ExecuTorch kernels)
    return ProgramSpec(spec.dynamic_shapes, {**spec.metadata, "use_sdpa_with_kv_cache": False,
                                             "enable_dynamic_shape": False})


def with_metadata(data: bytes, name: str, payload: bytes) -> bytes:
    """The `.tflite` flatbuffer `data` with a metadata entry `name` holding `payload` (replacing one of that name)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    if any(buffer.offset for buffer in model.buffers or []):
        # a model past 2 GB keeps its weights after the flatbuffer, at offsets a rewrite would invalidate
        raise UserInputError("this LiteRT generator is over 2 GB; its metadata cannot be written")
    model.buffers = list(model.buffers or [])
    # the object API keeps names as the bytes it read
    entries = [entry for entry in model.metadata or [] if entry.name not in (name, name.encode())]
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(payload, dtype=np.uint8)
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = name, len(model.buffers) - 1
    model.metadata = [*entries, entry]
    builder = flatbuffers.Builder(len(data) + len(payload) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def read_metadata_at(path: Path, name: str = METADATA_NAME) -> dict[str, Any]:
    """`read_metadata` of the file at `path`, mapped rather than read: only the pages of the metadata are touched, so
    loading a generator neither reads its weights twice nor holds a copy of them (which a peak-memory figure of the
    loading process would count)."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return read_metadata(mapped)


def read_metadata(data: bytes, name: str = METADATA_NAME) -> dict[str, Any]:
    """The JSON metadata entry `name` of a `.tflite` flatbuffer; {} when it has none."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    for index in range(model.MetadataLength()):
        entry = model.Metadata(index)
        if entry.Name() is not None and entry.Name().decode() == name:
            return json.loads(model.Buffers(entry.Buffer()).DataAsNumpy().tobytes())
    return {}


class LiteRTGenerator:
    """A loaded LiteRT generator called like an ExecuTorch one: `(input_ids [1, S], cache_position [S])` →
    `[logits [1, S, vocab]]`, the cache kept in the interpreter between calls (a new sequence starts again at
    position 0). The calls are the device script's (`edgeprune.bench.litert_generate.CachedGenerator`), so what
    edgeprune measures here is what runs on a board."""

    def __init__(self, interpreter: Any, constants: dict[str, Any]) -> None:
        self._constants = constants
        self.max_seq_len = int(constants["get_max_seq_len"])
        self.context = int(constants["get_max_context_len"])
        try:
            self._generator = CachedGenerator(interpreter, constants)
        except ValueError as error:
            raise UserInputError(f"this LiteRT generator cannot be run: {error}") from None

    def constants(self) -> dict[str, Any]:
        return dict(self._constants)

    def __call__(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> list[torch.Tensor]:
        ids, start = input_ids.reshape(-1).tolist(), int(cache_position[0])
        if len(ids) > self.max_seq_len and start + self.max_seq_len <= self.context:
            raise ValueError(f"{len(ids)} tokens in one call; the prefill signature takes {self.max_seq_len}")
        return [torch.from_numpy(self._generator.logits(ids, start)[None])]
