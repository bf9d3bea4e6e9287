"""How weights are stored: one descriptor per format (fp32, fp16, int8, int4) that owns what edgeprune knows about
it: its fidelity rank, what each element costs in the file, how a linear layer and an embedding table are quantized
to it in PyTorch, and its size rule with the quantization parameters it adds. A recipe names a format for its
linears and one for its tables (edgeprune/quantize/recipes.py) and each format's handler does the rest, the way
torchao registers each config to its handler: a new format is one descriptor registered in FORMATS.

Runtimes add their own per-row and per-group parameters (`RuntimeSpec.row_parameter_bytes`, `group_scale_bytes`);
LiteRT's recipes quantize the converted file instead of the module (its descriptor says so), and the size rules
here describe what either runtime stores."""

from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
from torch import nn

from edgeprune.quantize.int4_embedding import Int4Embedding, scale_bytes_per_row
from edgeprune.quantize.int8_embedding import Int8Embedding
from edgeprune.registry import Registry
from edgeprune.runtimes import RuntimeSpec

TABLE_SCALE_BYTES = 4  # Int8Embedding's fp32 scale per row


@dataclass(frozen=True, eq=False)  # a descriptor: one object per format, compared by identity
class WeightFormat:
    name: str
    rank: int  # fidelity: 0 for fp32, higher for fewer bits
    element_bytes: float  # bytes per stored weight (int4: two per byte)
    # the bytes of parameters outside linears and tables (biases, norms) in a recipe whose linears use this format
    other_parameter_bytes: float = 4.0
    quantized: bool = False  # integer storage with scales (the per-row and per-group rules below apply)
    grouped: bool = False  # linears carry one scale per group of columns (else one per row)
    table_module: Callable[[nn.Embedding], nn.Module] | None = None  # edgeprune's table module (from_embedding)
    # the torchao config that stores linears in this format (None: linears stay as they are in PyTorch)
    linear_config: Callable[[int], object] | None = None

    def stores_grouped(self, cols: int, group: int) -> bool:
        """Whether a linear of `cols` inputs is stored in this format's groups: a grouped format whose `group`
        divides the width (any other width is stored at 8 bits, the recipes' rule)."""
        return self.grouped and cols % group == 0

    def linear_bytes(self, rows: int, cols: int, runtime: RuntimeSpec, group: int) -> float:
        """Bytes of one linear's weight: elements, then one scale per group of `group` columns or one set of
        quantization parameters per row. A width `group` does not divide is stored at 8 bits (the recipe's rule)."""
        if self.grouped and not self.stores_grouped(cols, group):
            return FORMATS.get("int8").linear_bytes(rows, cols, runtime, group)
        data = rows * cols * self.element_bytes
        if self.grouped:
            return data + rows * -(-cols // group) * runtime.group_scale_bytes
        return data + (rows * runtime.row_parameter_bytes if self.quantized else 0)

    def table_bytes(self, rows: int, cols: int, runtime: RuntimeSpec, in_pytorch: bool) -> float:
        """Bytes of one embedding table: edgeprune's own table modules (`in_pytorch`) keep their scales (an fp32 per
        row at 8 bits, fp16 per group at 4); a runtime's quantizer keeps its per-row parameters."""
        data = rows * cols * self.element_bytes
        if not self.quantized:
            return data
        if in_pytorch:
            return data + rows * (scale_bytes_per_row(cols) if self.grouped else TABLE_SCALE_BYTES)
        return data + rows * runtime.row_parameter_bytes

    def quantize_tables(self, model: nn.Module) -> None:
        """Replace every nn.Embedding of `model` by this format's table module (nothing for a float format)."""
        if self.table_module is None:
            return
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Embedding):
                    setattr(parent, name, self.table_module(child))

    def quantize_linears(self, model: nn.Module, group: int, skip: Collection[nn.Module] = ()) -> None:
        """Store `model`'s linears (`model` itself if it is one), all but `skip`, in this format with torchao (int8
        dynamic activations); a grouped format keeps linears whose width `group` does not divide at 8 bits."""
        if self.linear_config is None:
            return
        from torchao.quantization import quantize_

        skipped = {id(module) for module in skip}

        def linear(module: nn.Module) -> bool:
            return isinstance(module, nn.Linear) and id(module) not in skipped

        def fits(module: nn.Module, _name: str = "") -> bool:
            return linear(module) and self.stores_grouped(module.in_features, group)

        if not self.grouped:
            quantize_(model, self.linear_config(group), filter_fn=lambda m, _: linear(m))
            return
        quantize_(model, self.linear_config(group), filter_fn=fits)
        quantize_(model, FORMATS.get("int8").linear_config(group), filter_fn=lambda m, _: linear(m) and not fits(m))


def output_layer(model: nn.Module) -> nn.Linear | None:
    """The linear mapping a language model's hidden states to vocabulary logits (Hugging Face's output embeddings:
    `lm_head`), found in `model` or the first module of it that has one; None for a model without."""
    for module in model.modules():
        getter = getattr(module, "get_output_embeddings", None)
        if callable(getter):
            head = getter()
            if isinstance(head, nn.Linear):
                return head
    return None


def int8_linears(_group: int) -> object:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerAxis

    return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))


def int4_linears(group: int) -> object:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerGroup

    return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group))


FORMATS: Registry[WeightFormat] = Registry("weight format")
for _format in (
    WeightFormat("fp32", 0, 4.0),
    WeightFormat("fp16", 1, 2.0, other_parameter_bytes=2.0),
    WeightFormat("int8", 2, 1.0, quantized=True, table_module=Int8Embedding.from_embedding, linear_config=int8_linears),
    WeightFormat("int4", 3, 0.5, quantized=True, grouped=True, table_module=Int4Embedding.from_embedding,
                 linear_config=int4_linears),
):
    FORMATS.register(_format.name)(_format)
