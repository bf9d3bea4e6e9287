"""A decoder's output layer at 4 bits, placed by GPTQ, and the embedding table tied to it read from the same codes.

The output layer (the vocabulary projection) is a decoder's largest matrix, and each decode step reads all of it:
at int8 it was 16 % of a LiteRT SmolLM2 decode step (docs/FINDINGS.md). Rounded to asymmetric 4-bit blocks of 32 it
cost SmolLM2-135M +6.7 % perplexity, placed by GPTQ on calibration text +1.4 % (edgeprune/quantize/gptq.py).

A tied model looks its input embeddings up in the same matrix. An int8 table beside a 4-bit output layer would
cost 28 MB for SmolLM2, more than the 4 bits save, so `TiedFourBitEmbedding` looks rows up in the output layer's
own codes, packed two to a byte as LiteRT stores INT4 weights (the first in the low nibble): the lookup's table
holds the same bytes as the output layer's weight, and the LiteRT exporter keeps one copy
(edgeprune/export/litert_buffers.py). The lookup's steps and offsets are its own (int16 with a scale per row:
LiteRT's converter gathers from no fp16 table), 3.9 MB for SmolLM2.
"""

from collections.abc import Sequence

import torch
from torch import nn

from edgeprune.quantize.block_offsets import SHIFT, BlockOffsetLinear, block_codes, pack_int4
from edgeprune.quantize.formats import output_layer
from edgeprune.quantize.gptq import gptq_blocks, input_moment

NIBBLE = 16
INT16_LARGEST = 32767
# the lookup's own bytes beside the output layer's codes: an int16 step and offset per block, two fp32 scales per row
TIED_BLOCK_BYTES, TIED_ROW_BYTES = 4, 8


class TiedFourBitEmbedding(nn.Module):
    """An embedding lookup whose rows are the 4-bit output layer's: codes k packed two to a byte (int8 [vocab,
    dim / 2]), steps d and offsets c per block of `group` (fp16 [vocab, dim / group]); a row is k·d + c."""

    def __init__(self, codes: torch.Tensor, steps: torch.Tensor, offsets: torch.Tensor, group: int,
                 padding_idx: int | None = None) -> None:
        super().__init__()
        vocab, dim = codes.shape
        if dim % group or dim % 2:
            raise ValueError(f"{dim} columns have no whole blocks of {group}")
        if steps.shape != (vocab, dim // group) or offsets.shape != steps.shape:
            raise ValueError(f"steps {tuple(steps.shape)} and offsets {tuple(offsets.shape)} for {vocab} rows of "
                             f"{dim // group} blocks")
        self.group, self.embedding_dim, self.num_embeddings = group, dim, vocab
        self.padding_idx = padding_idx
        # LiteRT's INT4 bytes read as int8: a byte = the low code's nibble + 16 × the high code, in −128..127
        packed = torch.frombuffer(bytearray(pack_int4(codes.numpy())), dtype=torch.int8)
        self.register_buffer("packed", packed.reshape(vocab, dim // 2))
        # steps and offsets as int16 with a scale per row: LiteRT's converter gathers from no fp16 table, and an fp32
        # one would be twice the size (15 bits of each row's largest: far finer than the 4-bit codes they scale)
        for name, values in (("steps", steps), ("offsets", offsets)):
            scale = values.float().abs().amax(1, keepdim=True) / INT16_LARGEST
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            self.register_buffer(f"{name}_int16", torch.round(values.float() / scale).to(torch.int16))
            self.register_buffer(f"{name}_scale", scale)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized table, for code that reads `.weight`."""
        return self(torch.arange(self.num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        pairs = torch.index_select(self.packed, 0, flat).float()
        high = torch.floor(pairs / NIBBLE)  # the signed high code
        low = pairs - NIBBLE * high  # the low nibble, 0..15
        low = low - NIBBLE * torch.floor(low / SHIFT)  # signed: 8..15 → −8..−1
        codes = torch.stack([low, high], dim=-1).reshape(flat.shape[0], -1, self.group)
        steps = torch.index_select(self.steps_int16, 0, flat).float() * torch.index_select(self.steps_scale, 0, flat)
        offsets = torch.index_select(self.offsets_int16, 0, flat).float() * \
            torch.index_select(self.offsets_scale, 0, flat)
        rows = codes * steps[..., None] + offsets[..., None]
        return rows.reshape(*ids.shape, self.embedding_dim)


def holder_of(model: nn.Module, getter: str, held: nn.Module | None) -> nn.Module | None:
    """The module of `model` whose Hugging Face `getter` (get_output_embeddings / get_input_embeddings) returns
    `held`, i.e. whose matching setter replaces it."""
    return next((module for module in model.modules()
                 if callable(getattr(module, getter, None)) and getattr(module, getter)() is held), None)


def quantize_output_layer(model: nn.Module, calibration: Sequence[tuple[torch.Tensor, ...]], group: int) -> bool:
    """Replace `model`'s output layer, in place, by its GPTQ quantization to asymmetric 4-bit blocks of `group`
    (a BlockOffsetLinear, inputs observed while `model` runs on each calibration batch), and an embedding table
    tied to it by a TiedFourBitEmbedding reading the same codes. False (and nothing changed) for a model without an
    output layer, or one whose width has no whole blocks."""
    head = output_layer(model)
    if head is None or head.in_features % group:
        return False
    moment = input_moment(model, head, calibration)
    symmetric, offsets = gptq_blocks(head.weight, moment, group)
    plain = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
    plain.weight = nn.Parameter(symmetric)
    if head.bias is not None:
        plain.bias = nn.Parameter(head.bias.detach().float().clone())
    tables = [module for module in model.modules() if isinstance(module, nn.Embedding) and module.weight is head.weight]
    holder_of(model, "get_output_embeddings", head).set_output_embeddings(BlockOffsetLinear(plain, group, offsets))
    embedding_holder = holder_of(model, "get_input_embeddings", tables[0]) if tables else None
    if embedding_holder is not None:
        table = tables[0]
        codes, steps = block_codes(symmetric.numpy(), group)
        embedding_holder.set_input_embeddings(TiedFourBitEmbedding(
            torch.from_numpy(codes), torch.from_numpy(steps), offsets, group, table.padding_idx))
    return True
