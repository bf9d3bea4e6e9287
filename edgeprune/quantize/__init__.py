"""Quantization recipes and the size model."""

from torch import nn

from edgeprune.quantize.recipes import FIT_LADDER, RECIPES, Recipe
from edgeprune.quantize.size_model import SizeModel, payload_bytes


def quantize(model: nn.Module, recipe: str | Recipe = "int8") -> nn.Module:
    """Return a quantized copy of `model` by the named recipe."""
    return (RECIPES.get(recipe) if isinstance(recipe, str) else recipe).apply(model)


__all__ = ["FIT_LADDER", "RECIPES", "Recipe", "SizeModel", "payload_bytes", "quantize"]
