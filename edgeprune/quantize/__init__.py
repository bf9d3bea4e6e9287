"""Quantization recipes and the size model."""

from collections.abc import Sequence

import torch
from torch import nn

from edgeprune.quantize.recipes import (
    CALIBRATION_EXAMPLES,
    FIT_LADDERS,
    FP32_RECIPE,
    RECIPES,
    UNVERIFIED_RECIPES,
    Recipe,
    any_recipe,
    fidelity_rank,
    fit_ladder,
    recipe_for_runtime,
    recipes_for,
)
from edgeprune.quantize.size_model import SizeModel, payload_bytes


def quantize(model: nn.Module, recipe: str | Recipe = "int8",
             calibration: Sequence[tuple[torch.Tensor, ...]] | None = None) -> nn.Module:
    """The PyTorch module a recipe exports: a quantized copy of `model` (LiteRT's fp16 and dynamic int8
    quantize later, on the converted flatbuffer, so they return an fp32 copy). Recipes that calibrate
    (`Recipe.needs_calibration`) need `calibration`: real task inputs at the export shape."""
    return (RECIPES.get(recipe) if isinstance(recipe, str) else recipe).apply(model, calibration)


__all__ = ["CALIBRATION_EXAMPLES", "FIT_LADDERS", "FP32_RECIPE", "RECIPES", "UNVERIFIED_RECIPES", "Recipe", "SizeModel",
           "any_recipe", "fidelity_rank", "fit_ladder", "payload_bytes", "quantize", "recipe_for_runtime",
           "recipes_for"]
