"""How the best-first searcher (`edgeprune.search.searcher`) ranks candidates it has not built: the most a
structure's estimate can be before it is measured, the margin artifacts were seen to gain over their estimates,
what a recipe loses to quantization, and which recipes keep at least another's quality."""

from collections.abc import Callable

from edgeprune.quantize import RECIPES, fidelity_rank
from edgeprune.search.recovering import signed_value as signed
from edgeprune.search.result import BuiltArtifact
from edgeprune.search.space import Shape
from edgeprune.tasks.base import Quality


def ceiling(shape: Shape, measured: dict[Shape, float]) -> float:
    """The most `shape`'s estimate (signed, higher better) can be, by the search's assumption that quality does not
    rise with compression: the least of the measured estimates of structures it is at least as compressed as
    (infinite when none is measured), plus the most the measured estimates break that assumption by (a few heads
    removed may score a little above the dense model on a small validation split)."""
    below = [value for other, value in measured.items() if shape.structure.at_least_as_compressed_as(other)]
    if not below:
        return float("inf")
    excess = max([0.0, *(value - other_value for structure, value in measured.items()
                         for other, other_value in measured.items()
                         if structure != other and structure.at_least_as_compressed_as(other))])
    return min(below) + excess


def largest_gain(anchors: list[tuple[str, Shape, BuiltArtifact]], proxy: Callable[[Shape], Quality]) -> float:
    """How far above its PyTorch estimate any artifact measured (0 when none did): the bound's margin. Losses
    are not subtracted from the bound, since they depend on the structure (int4 loses more on a narrower
    FFN); they only order the contenders."""
    gains = [signed(artifact.validation_quality) - signed(proxy(shape))
             for _, shape, artifact in anchors if artifact.validation_quality is not None]
    return max([0.0, *gains])


def quantization_loss(recipe: str, anchors: list[tuple[str, Shape, BuiltArtifact]], order: dict[str, int],
                       proxy: Callable[[Shape], Quality], estimated: dict[str, float]) -> float:
    """The least validation quality a recipe was measured to lose against the PyTorch estimate of the same
    structure; a recipe not measured yet the larger of its loss estimated in PyTorch on the dense model
    (`estimated`) and the largest loss of a higher-fidelity recipe (lower fidelity loses at least as much), else 0."""
    losses: dict[str, list[float]] = {}
    for name, shape, artifact in anchors:
        if artifact.validation_quality is not None:
            losses.setdefault(name, []).append(signed(proxy(shape)) - signed(artifact.validation_quality))
    if recipe in losses:
        return min(losses[recipe])
    higher = [min(values) for name, values in losses.items()
              if name != recipe and at_least_as_faithful(name, recipe, order)]
    return max([*higher, *([estimated[recipe]] if recipe in estimated else [])], default=0.0)


def at_least_as_faithful(recipe: str, other: str, order: dict[str, int]) -> bool:
    """Whether `recipe` keeps at least `other`'s quality on the same structure, as far as the search assumes: of
    one runtime, by the ladder's order; across runtimes only when it stores every weight in at least as many bits
    and some in more (LiteRT fp16 over ExecuTorch int8; LiteRT int8 and ExecuTorch int8 are not ordered, so
    neither closes the other's lines)."""
    first, second = RECIPES.get(recipe), RECIPES.get(other)
    if first.runtime == second.runtime:
        return order[recipe] <= order[other]
    mine, theirs = fidelity_rank(first), fidelity_rank(second)
    return mine != theirs and all(a <= b for a, b in zip(mine, theirs, strict=True))
