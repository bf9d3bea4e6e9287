"""The search space of `fit`: what a candidate's structure can be, and the order structures compare in.

A candidate is a recipe (quantization + runtime) applied to a `Shape`: heads removed (global top-k over the
layers that stay), a fraction of every kept layer's FFN neurons removed, whole layers dropped (the most
redundant consecutive block) and, for text encoders, the vocabulary trimmed to the tokens the task's data
uses. One shape is *at least as compressed* as another when it removes at least as much in every dimension;
the search assumes quality does not rise with compression in any one dimension (it uses that to skip
structures that cannot beat one already measured) and that size and latency do not rise either.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from edgeprune.errors import UserInputError

MAX_FFN_FRACTION = 0.9


SHAPE_KEY = re.compile(r"h(?P<heads>\d+)-f(?P<ffn>\d+)-l(?P<layers>\d+)(?P<trim>-trim)?")


@dataclass(frozen=True, order=True)
class Shape:
    heads_removed: int = 0
    ffn_fraction: float = 0.0  # of each kept layer's FFN neurons removed
    layers_removed: int = 0
    trim_vocabulary: bool = False

    @property
    def key(self) -> str:
        return (f"h{self.heads_removed}-f{round(self.ffn_fraction * 100)}-l{self.layers_removed}"
                f"{'-trim' if self.trim_vocabulary else ''}")

    @classmethod
    def from_key(cls, key: str) -> "Shape":
        """The shape whose `key` this is (journal records are keyed by it)."""
        match = SHAPE_KEY.fullmatch(key)
        if match is None:
            raise ValueError(f"not a shape key: {key!r}")
        return cls(int(match["heads"]), int(match["ffn"]) / 100, int(match["layers"]), bool(match["trim"]))

    @property
    def structure(self) -> "Shape":
        """The same shape with the full vocabulary: what validation quality and FLOPs depend on (trimming keeps
        every token of the calibration and validation data, so it changes neither)."""
        return Shape(self.heads_removed, self.ffn_fraction, self.layers_removed, False)

    def at_least_as_compressed_as(self, other: "Shape") -> bool:
        return (self.heads_removed >= other.heads_removed and self.ffn_fraction >= other.ffn_fraction
                and self.layers_removed >= other.layers_removed and self.trim_vocabulary >= other.trim_vocabulary)

    def describe(self) -> str:
        parts = [f"{self.heads_removed} heads removed"]
        if self.ffn_fraction:
            parts.append(f"FFN −{self.ffn_fraction:.0%}")
        if self.layers_removed:
            parts.append(f"{self.layers_removed} layer{'s' if self.layers_removed > 1 else ''} removed")
        if self.trim_vocabulary:
            parts.append("vocabulary trimmed")
        return ", ".join(parts)


@dataclass(frozen=True)
class Line:
    """Every head count of one recipe × FFN fraction × layers removed × vocabulary choice."""

    recipe: str
    ffn_fraction: float
    layers_removed: int
    trim_vocabulary: bool

    def shape(self, heads_removed: int) -> Shape:
        return Shape(heads_removed, self.ffn_fraction, self.layers_removed, self.trim_vocabulary)


def parse_fractions(values: Iterable[float]) -> tuple[float, ...]:
    fractions = tuple(sorted({round(float(v), 4) for v in values}))
    if not fractions or any(not 0 <= f <= MAX_FFN_FRACTION for f in fractions):
        raise UserInputError(f"FFN fractions must be between 0 and {MAX_FFN_FRACTION} (e.g. 0,0.25,0.5), "
                             f"got {list(values)}")
    return fractions


def parse_layer_counts(values: Iterable[int], layers: int | None = None) -> tuple[int, ...]:
    counts = tuple(sorted({int(v) for v in values}))
    limit = None if layers is None else layers - 1
    if not counts or any(c < 0 or (limit is not None and c > limit) for c in counts):
        bound = "" if limit is None else f" and at most {limit} (the model has {layers} layers)"
        raise UserInputError(f"layers removed must be >= 0{bound}, e.g. 0,1,2; got {list(values)}")
    return counts


def lines(recipes: Iterable[str], ffn_fractions: Iterable[float], layer_counts: Iterable[int],
          vocabulary_choices: Iterable[bool]) -> list[Line]:
    """Every line of the space, highest-fidelity recipe and least compression first."""
    return [Line(recipe, ffn, layers, trim) for recipe in recipes for trim in vocabulary_choices
            for layers in layer_counts for ffn in ffn_fractions]
