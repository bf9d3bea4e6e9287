"""What a recipe's quantization costs the dense teacher, measured in PyTorch before any file of it is exported.

A recipe quantized in PyTorch (`Recipe.quantized_in_pytorch`: ExecuTorch's) exports the very module `Recipe.apply`
makes, and verification holds the artifact to that module (cosine 0.99 or closer), so the module's validation
quality, measured eagerly in seconds, is what the artifact measures: on SmolLM2-135M (validation perplexity,
docs/FINDINGS.md) symmetric `int4` 65.53 in PyTorch against 65.40 through its program, `int4-decoder-all` 43.57 against
43.42, in 19 and 37 s where the export takes 4 and 7 minutes. The searcher ranks a recipe no artifact has measured
yet by this loss (`edgeprune.search.searcher`), so that a recipe that wrecks the model is not the first candidate
built. LiteRT's recipes quantize the converted file (their PyTorch source stays in float), calibrated ones need
PT2E's graph, and a float recipe loses nothing: those are estimated by the recipe that stores their weights the
same way in PyTorch (`stand_in`), if any.
"""

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from torch import nn

from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES, Recipe
from edgeprune.quantize.formats import FORMATS
from edgeprune.quantize.static_int8 import Inputs
from edgeprune.search.journal import Journal
from edgeprune.search.shared import SharedWork
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable
from edgeprune.tasks.base import Quality, Task, batched_quality

RECIPE_MARK = "@"  # journal key of a recipe's estimate: the structure's key, the mark, the recipe's name


class EstimatingBuilder(Protocol):
    """What a recipe's estimate uses of `edgeprune.search.builder.CandidateBuilder`."""

    teacher: nn.Module
    task: Task
    progress: Progress
    journal: Journal
    shared: SharedWork


def estimable(recipe: Recipe) -> bool:
    """Whether `recipe`'s quantization can be measured in PyTorch: done by `Recipe.apply` with torchao, uncalibrated
    activations, and some weights stored in fewer bits than fp32."""
    stores_fewer_bits = FORMATS.get(recipe.linear).quantized or FORMATS.get(recipe.embedding).quantized
    return recipe.quantized_in_pytorch and not recipe.calibrated and stores_fewer_bits


def stand_in(recipe: Recipe) -> Recipe | None:
    """The recipe whose PyTorch module estimates `recipe`: itself when `estimable`; for one quantized outside
    PyTorch (LiteRT's), the estimable recipe that stores every weight in the same format the same way (litert-int8:
    int8; litert-int4-all: int4-decoder-all, asymmetric blocks with a calibrated 4-bit output layer), so that a
    recipe is not ranked ahead of another merely because its runtime cannot be estimated; else None (fp16, static
    activation ranges)."""
    if estimable(recipe):
        return recipe

    def storage(other: Recipe) -> tuple:
        return (other.linear, other.embedding, other.output_layer or other.linear, other.output_layer_calibrated,
                other.asymmetric_blocks, other.calibrated)

    return next((other for other in RECIPES.members.values() if estimable(other) and storage(other) == storage(recipe)),
                None)


def recipe_key(recipe: Recipe) -> str:
    """The journal key of `recipe`'s estimate on the dense structure."""
    return f"{Shape().key}{RECIPE_MARK}{recipe.name}"


def recipe_estimate(builder: EstimatingBuilder, recipe: Recipe,
                    calibration: Callable[[Recipe], Sequence[Inputs] | None]) -> Quality | None:
    """The dense teacher's validation quality with `recipe` (or its `stand_in`) applied, in PyTorch: measured once
    per fit, journaled, shared with a fleet's other devices; None when no recipe can stand in. `calibration`: what
    `Recipe.apply` needs for a recipe that calibrates (its output layer's GPTQ placement)."""
    recipe = stand_in(recipe)
    if recipe is None:
        return None
    key, proxies = recipe_key(recipe), builder.journal.proxies
    if key not in proxies and key in builder.shared.proxies:  # measured for another device of the fleet
        builder.journal.record_proxy(key, builder.shared.proxies[key])
    if key not in proxies:
        mark = time.perf_counter()
        quantized = recipe.apply(builder.teacher, calibration(recipe))
        quality = batched_quality(builder.task, quantized, "validation")
        builder.journal.record_proxy(key, to_jsonable(quality))
        builder.progress.note(f"  PyTorch estimate for {recipe.name} on the dense model: validation {quality.metric} "
                              f"{quality.value:.4f} ({time.perf_counter() - mark:.0f} s)")
    builder.shared.proxies[key] = proxies[key]
    return from_jsonable(Quality, proxies[key])


def is_recipe_key(key: str) -> bool:
    return RECIPE_MARK in key
