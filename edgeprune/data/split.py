"""A deterministic, seeded split into calibration, validation and test data; stratified by label when labelled.

The split depends on the seed, the ratios and the examples themselves (a text's content, an image's
`<class>/<file>` name or, for an image of an in-memory data set, a digest of its bytes), not on the order in which
rows or files were read: reordering a CSV gives the same split.
Each example's place comes from a keyed hash of its content, so identical texts sit next to each other and land in
the same split unless a cut falls between them.
"""

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from edgeprune.data.base import Examples, LabeledImage, LabeledText
from edgeprune.errors import UserInputError

Example = LabeledText | LabeledImage
SPLIT_NAMES = ("calibration", "validation", "test")


@dataclass(frozen=True)
class SplitRatios:
    calibration: float = 0.55  # scoring heads and fitting the teacher's head
    validation: float = 0.15  # export checks and search decisions
    test: float = 0.30  # final quality only; never used for decisions

    def __post_init__(self) -> None:
        parts = (self.calibration, self.validation, self.test)
        valid = all(isinstance(p, int | float) and not isinstance(p, bool) and math.isfinite(p) and p > 0
                    for p in parts)
        if not valid or abs(sum(parts) - 1) > 1e-6:
            raise UserInputError(f"split ratios (calibration, validation, test) must be positive and sum to 1, got "
                                 f"{parts}; for example 0.55,0.15,0.30")

    @classmethod
    def parse(cls, text: str) -> "SplitRatios":
        """'0.6,0.2,0.2' or percentages '60,20,20', in the order calibration, validation, test."""
        try:
            parts = [float(part) for part in text.replace("/", ",").split(",")]
        except ValueError:
            parts = []
        if len(parts) != 3:
            raise UserInputError(f"split ratios {text!r} should be three numbers for calibration, validation and "
                                 "test, such as 0.55,0.15,0.30 or 55,15,30")
        if abs(sum(parts) - 100) < 1e-6:
            parts = [part / 100 for part in parts]
        return cls(*parts)


@dataclass(frozen=True)
class DataSplits:
    calibration: list[LabeledText] | list[LabeledImage]
    validation: list[LabeledText] | list[LabeledImage]
    test: list[LabeledText] | list[LabeledImage]  # final quality only; never used for decisions

    def sizes(self) -> dict[str, int]:
        return {"calibration": len(self.calibration), "validation": len(self.validation), "test": len(self.test)}


def _order(seed: int) -> Callable[[Example], tuple]:
    def key(example: Example) -> tuple:
        content = _content(example)
        digest = hashlib.blake2b(f"{seed}\x00{content}".encode(), digest_size=16).digest()
        return digest, content, example.source, example.label

    return key


def _cut(count: int, ratios: SplitRatios) -> tuple[int, int]:
    """Calibration and validation sizes for `count` (>= 3) examples: every split gets at least one."""
    n_validation = max(1, round(count * ratios.validation))
    n_calibration = min(max(1, round(count * ratios.calibration)), count - n_validation - 1)
    return n_calibration, n_validation


def _content(example: Example) -> str:
    """What identifies an example: a text; an in-memory image's digest, or an image file's <class>/<file> name."""
    if isinstance(example, LabeledText):
        return example.text
    return example.digest or example.source


def _clean_cuts(ordered: list[Example], n_calibration: int, n_validation: int) -> tuple[int, int]:
    """Move each cut off a run of identical texts (the order puts them side by side), so a duplicated
    document never sits in two splits; every split keeps at least one example where it can."""
    def clean(position: int, low: int, high: int) -> int:
        forward = position
        while low < forward < high and _content(ordered[forward]) == _content(ordered[forward - 1]):
            forward += 1
        if forward < high:
            return forward
        backward = position
        while low < backward and _content(ordered[backward]) == _content(ordered[backward - 1]):
            backward -= 1
        return backward if backward > low else position

    first = clean(n_calibration, 0, len(ordered) - 1)
    second = clean(max(first + 1, n_calibration + n_validation), first + 1, len(ordered))
    return first, second - first


def stratified_split(documents: Sequence[Example], ratios: SplitRatios, seed: int) -> DataSplits:
    """Each label is cut by the ratios on its own, so every split holds every label; each label needs 3 examples."""
    by_label: dict[str, list[Example]] = defaultdict(list)
    for document in documents:
        by_label[document.label].append(document)
    order = _order(seed)
    calibration, validation, test = [], [], []
    for label in sorted(by_label):
        group = sorted(by_label[label], key=order)
        if len(group) < 3:
            raise UserInputError(
                f"label {label!r} has only {len(group)} example{'s' if len(group) != 1 else ''}; each label needs at "
                f"least 3 so that calibration, validation and test each see it: add examples of {label!r} or "
                "leave the label out")
        n_calibration, n_validation = _clean_cuts(group, *_cut(len(group), ratios))
        calibration += group[:n_calibration]
        validation += group[n_calibration:n_calibration + n_validation]
        test += group[n_calibration + n_validation:]
    # labels interleaved, not one block per label: a consumer that reads only the first N still sees every label
    splits = DataSplits(sorted(calibration, key=order), sorted(validation, key=order), sorted(test, key=order))
    check_calibration_labels(splits)
    return splits


def random_split(examples: Sequence[Example], ratios: SplitRatios, seed: int) -> DataSplits:
    """A seeded split that ignores labels, for unlabelled data (embedding, causal-LM)."""
    if len(examples) < 3:
        raise UserInputError(f"{len(examples)} example{'s' if len(examples) != 1 else ''} cannot be split into "
                             "calibration, validation and test; give at least 3")
    ordered = sorted(examples, key=_order(seed))
    n_calibration, n_validation = _clean_cuts(ordered, *_cut(len(ordered), ratios))
    return DataSplits(ordered[:n_calibration], ordered[n_calibration:n_calibration + n_validation],
                      ordered[n_calibration + n_validation:])


def split_examples(examples: Examples, ratios: SplitRatios | None = None, seed: int = 0) -> DataSplits:
    """Stratified by label for labelled data, a plain seeded split otherwise."""
    ratios = ratios or SplitRatios()
    if examples.labelled:
        return stratified_split(examples.items, ratios, seed)
    return random_split(examples.items, ratios, seed)


def check_calibration_labels(splits: DataSplits) -> None:
    """Every label of the validation and test splits must also be in calibration, where the head learns it."""
    calibration = {example.label for example in splits.calibration}
    validation = Counter(example.label for example in splits.validation)
    test = Counter(example.label for example in splits.test)
    for label in sorted((set(validation) | set(test)) - calibration):
        where = "test split" if label not in validation else ("validation split" if label not in test
                                                               else "validation and test splits")
        count = validation[label] + test[label]
        raise UserInputError(
            f"label {label!r} appears only in the {where} ({count} example{'s' if count != 1 else ''}), never in "
            f"calibration, so the model would be judged on a class it never saw; add examples of {label!r} or "
            "give calibration a larger share of the split ratios")


def describe_split(splits: DataSplits) -> dict[str, Any]:
    """Sizes and per-split class balance (examples per label, 0 where a label is absent), ready to print or save."""
    every = [example for name in SPLIT_NAMES for example in getattr(splits, name)]
    labelled = any(example.label for example in every)
    labels = sorted({example.label for example in every}) if labelled else []
    balance = {}
    for name in SPLIT_NAMES:
        counts = Counter(example.label for example in getattr(splits, name))
        balance[name] = {label: counts[label] for label in labels}
    return {"sizes": splits.sizes(), "total": len(every), "labelled": labelled, "labels": labels,
            "class_balance": balance}
