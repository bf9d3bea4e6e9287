"""Quantization recipes and the size model."""

from torch import nn

from edgeprune.quantize.recipes import (
    FIT_LADDERS,
    FP32_RECIPE,
    RECIPES,
    Recipe,
    recipe_for_runtime,
    recipes_for,
)
from edgeprune.quantize.size_model import SizeModel, payload_bytes


def quantize(model: nn.Module, recipe: str | Recipe = "int8") -> nn.Module:
    """The PyTorch module a recipe exports: a quantized copy of `model` (LiteRT recipes quantize later,
    on the converted flatbuffer, so they return an fp32 copy)."""
    return (RECIPES.get(recipe) if isinstance(recipe, str) else recipe).apply(model)


__all__ = ["FIT_LADDERS", "FP32_RECIPE", "RECIPES", "Recipe", "SizeModel", "payload_bytes", "quantize",
           "recipe_for_runtime", "recipes_for"]
