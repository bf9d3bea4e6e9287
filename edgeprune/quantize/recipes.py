"""Quantization recipes: small configs in a registry, each with the tolerance its export must meet."""

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from edgeprune.quantize.int8_embedding import Int8Embedding
from edgeprune.registry import Registry

WeightFormat = Literal["fp32", "int8"]


@dataclass(frozen=True)
class Recipe:
    name: str
    linear: WeightFormat  # int8: dynamic int8 activations, per-channel symmetric int8 weights (torchao)
    embedding: WeightFormat  # int8: per-row symmetric int8 table (Int8Embedding)
    min_cosine: float  # runtime output vs. this recipe's PyTorch module, worst case over inputs
    description: str

    def apply(self, model: nn.Module) -> nn.Module:
        """A quantized copy of `model`; the original is left untouched."""
        quantized = copy.deepcopy(model).eval()
        if self.embedding == "int8":
            _replace_embeddings(quantized)
        if self.linear == "int8":
            from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
            from torchao.quantization.granularity import PerAxis

            quantize_(quantized, Int8DynamicActivationIntxWeightConfig(
                weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
        return quantized


def _replace_embeddings(model: nn.Module) -> None:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Embedding):
                setattr(parent, name, Int8Embedding.from_embedding(child))


RECIPES: Registry[Recipe] = Registry("quantization recipe")
for _recipe in (
    Recipe("fp32", "fp32", "fp32", 0.99999, "no quantization"),
    Recipe("int8-linear", "int8", "fp32", 0.999, "int8 linears, fp32 embeddings"),
    Recipe("int8", "int8", "int8", 0.999, "int8 linears and int8 per-row embedding tables"),
):
    RECIPES.register(_recipe.name)(_recipe)

# the fit loop tries recipes in this order: highest fidelity first, smallest last
FIT_LADDER = ("int8-linear", "int8")
