"""A recipe's file overhead learnt from two small exports, before its first candidate of a large model is exported.

The size model's payload is exact (`edgeprune.quantize.size_model`); what a file adds on top (the program's records,
delegate headers, a LiteRT generator's second signature's quantization parameters) is per layer, plus a fixed part,
and unknown until a file of the recipe is measured. Its first candidate is exported within a 5 % slack of the
budget on that account, and on a large model that export takes minutes (SmolLM2-135M: ExecuTorch's
`int4-decoder-all` 7.3 min, 0.67 MB over what the size model assumed, 1.7 % over the budget). Cut to 1 and 3
layers, the teacher exports in seconds (24 and 41 s), and the line through the two overheads is the recipe's
overhead at any depth: 730,816 bytes at 30 layers against the dense file's 731,264 (docs/FINDINGS.md). So a fit
calibrates a recipe that way when its first candidate is near the budget and the model is large enough that a
full export costs minutes (`worth_calibrating`).
"""

import copy
from collections.abc import Callable

from torch import nn

from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.quantize import Recipe, payload_bytes
from edgeprune.search.budget import Budget
from edgeprune.search.shape_facts import SIZE_MODEL_SLACK, ShapeFacts
from edgeprune.search.space import Shape

# a model this large takes minutes to export (SmolLM2-135M: 2-7 min here), one of 22M seconds (MiniLM: 5-15 s)
CALIBRATION_MIN_PARAMETERS = 50_000_000
CALIBRATION_LAYERS = (1, 3)  # the cuts measured (fewer for a model of fewer layers): the line's two points
FileSizer = Callable[[nn.Module, Recipe, str], int]  # the bytes of a model's file in a recipe, under a name


def cut_layers(teacher: nn.Module, keep: int) -> nn.Module:
    """A copy of `teacher` with its first `keep` layers only."""
    model = copy.deepcopy(teacher)
    layers = len(adapter_for(model).attention_blocks(model))
    adapter_for(model).remove_layers(model, list(range(keep, layers)))
    return model


def calibration_depths(layers: int) -> tuple[int, int] | None:
    """The two layer counts to cut to (None when the model has too few layers for two cuts)."""
    low, high = CALIBRATION_LAYERS[0], min(CALIBRATION_LAYERS[1], layers - 1)
    return (low, high) if high > low else None


def worth_calibrating(facts: ShapeFacts, recipe: Recipe, shape: Shape, budget: Budget,
                      min_parameters: int | None = None) -> bool:
    """Whether to calibrate `recipe` before building `shape`: a size budget the prediction is within the unmeasured
    recipe's slack of (either side), no file of the recipe measured yet, and a teacher large enough that its
    exports take minutes (`min_parameters`; default CALIBRATION_MIN_PARAMETERS)."""
    if budget.max_mb is None or facts.size_model.observed(recipe) or recipe.name in facts.layer_overhead \
            or recipe.name in facts.calibration_failed:
        return False
    if calibration_depths(facts.layers) is None:
        return False
    least = CALIBRATION_MIN_PARAMETERS if min_parameters is None else min_parameters
    if sum(p.numel() for p in facts.teacher.parameters()) < least:
        return False
    predicted, limit = facts.predict_bytes(shape, recipe), budget.max_mb * 1e6
    return limit / SIZE_MODEL_SLACK < predicted < limit * SIZE_MODEL_SLACK


def calibrate(facts: ShapeFacts, recipe: Recipe, measure: FileSizer, progress: Progress) -> None:
    """Export the teacher cut to two depths in `recipe` (`measure`: the file's bytes) and teach the shape facts the
    recipe's overhead per layer, and its overhead at the deeper cut."""
    depths = calibration_depths(facts.layers)
    if depths is None:
        raise ValueError(f"a model of {facts.layers} layers has too few to calibrate on")
    progress.note(f"  calibrating {recipe.name}'s file overhead on the teacher cut to {depths[0]} and {depths[1]} "
                  "layers (its first candidate is near the size budget)")
    overheads = []
    for keep in depths:
        model = cut_layers(facts.teacher, keep)
        overheads.append((keep, model, measure(model, recipe, f"size-{recipe.name}-{keep}-layers")))
    (low, low_model, low_bytes), (high, high_model, high_bytes) = overheads
    per_layer = ((high_bytes - payload_bytes(high_model, recipe))
                 - (low_bytes - payload_bytes(low_model, recipe))) / (high - low)
    # not a candidate's size (`ShapeFacts.size_observed`): a resumed fit calibrates again before replaying those
    facts.learn_overhead(recipe, Shape(layers_removed=facts.layers - high), high_bytes, high_model)
    facts.layer_overhead[recipe.name] = max(0.0, per_layer)
    progress.note(f"  {recipe.name}: {facts.size_model.overhead(recipe):,} bytes of overhead at {high} layers, "
                  f"{per_layer:,.0f} per layer")

