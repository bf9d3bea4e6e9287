"""A deterministic, seeded, stratified split into calibration, validation and test data."""

import random
from collections import defaultdict
from dataclasses import dataclass

from edgeprune.data.bbc import LabeledText
from edgeprune.errors import UserInputError


@dataclass(frozen=True)
class SplitRatios:
    calibration: float = 0.55  # scoring heads and fitting the teacher's head
    validation: float = 0.15  # export checks and search decisions
    test: float = 0.30  # final quality only; never used for decisions

    def __post_init__(self) -> None:
        parts = (self.calibration, self.validation, self.test)
        if any(p <= 0 for p in parts) or abs(sum(parts) - 1) > 1e-6:
            raise UserInputError(f"split ratios must be positive and sum to 1, got {parts}")


@dataclass(frozen=True)
class DataSplits:
    calibration: list[LabeledText]
    validation: list[LabeledText]
    test: list[LabeledText]

    def sizes(self) -> dict[str, int]:
        return {"calibration": len(self.calibration), "validation": len(self.validation), "test": len(self.test)}


def stratified_split(documents: list[LabeledText], ratios: SplitRatios, seed: int) -> DataSplits:
    by_label: dict[str, list[LabeledText]] = defaultdict(list)
    for document in documents:
        by_label[document.label].append(document)
    calibration, validation, test = [], [], []
    rng = random.Random(seed)
    for label in sorted(by_label):
        group = list(by_label[label])
        if len(group) < 3:
            raise UserInputError(f"label {label!r} has {len(group)} documents; each label needs at least 3 to split")
        rng.shuffle(group)
        n_cal = max(1, round(len(group) * ratios.calibration))
        n_val = max(1, round(len(group) * ratios.validation))
        n_cal = min(n_cal, len(group) - n_val - 1)
        calibration += group[:n_cal]
        validation += group[n_cal:n_cal + n_val]
        test += group[n_cal + n_val:]
    return DataSplits(calibration, validation, test)
