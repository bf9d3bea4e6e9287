"""One plan for everything removed from a dense model — heads, FFN neurons, whole layers, vocabulary rows — and
the one function that applies it, in one order, with one compensation, for `fit`, the CLI, recovery and load.

Every index in a `StructurePlan` refers to the dense model, so a plan means the same whatever was applied first.
The order of `apply_structure` is: vocabulary rows, heads (their mean outputs folded into the output-projection
bias), FFN neurons (theirs folded into the FFN output bias), then whole layers. Compensation is measured on the
dense model (FLAP, An et al. 2024), which is why heads and neurons go before the layers that shift indices.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.importance.defaults import default_scoring
from edgeprune.models import adapter_for
from edgeprune.pruning.compensation import HeadOutputMeans, measure_head_means
from edgeprune.pruning.ffn import intermediate_sizes, neuron_statistics, remove_neurons
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.surgery import apply_plan
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.serialization import json_codec

STRUCTURE_FORMAT_VERSION = 1


@json_codec
@dataclass
class StructurePlan:
    """What stays of a dense model, on its own indices. None / empty: that dimension is left whole."""

    heads: PruningPlan | None = None  # kept heads per layer (of every dense layer, removed ones included)
    ffn_kept: list[list[int]] | None = None  # per dense layer, the FFN neurons that stay (sorted)
    layers_removed: list[int] = field(default_factory=list)  # dense layers dropped whole
    vocabulary: VocabularyMap | None = None  # token rows kept (inputs go through the map)
    format_version: int = STRUCTURE_FORMAT_VERSION

    def describe(self) -> str:
        parts = []
        if self.heads is not None:
            parts.append(f"{self.heads.heads_removed} of {sum(self.heads.num_heads)} heads removed")
        if self.ffn_kept is not None:
            parts.append(f"FFN widths {[len(kept) for kept in self.ffn_kept]}")
        if self.layers_removed:
            parts.append(f"layers {self.layers_removed} removed")
        if self.vocabulary is not None:
            parts.append(f"vocabulary {len(self.vocabulary.kept_ids)} of {self.vocabulary.original_size}")
        return ", ".join(parts) or "dense"

    def to_dict(self) -> dict[str, Any]:
        vocabulary = self.vocabulary
        return {"format_version": self.format_version,
                "heads": None if self.heads is None else self.heads.to_dict(),
                "ffn_kept": self.ffn_kept, "layers_removed": list(self.layers_removed),
                "vocabulary": None if vocabulary is None else {"original_size": vocabulary.original_size,
                                                               "kept_ids": vocabulary.kept_ids,
                                                               "unk_id": vocabulary.unk_id}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StructurePlan":
        version = data.get("format_version")
        if version != STRUCTURE_FORMAT_VERSION:
            raise UserInputError(f"structure plan format {version!r} is not one this edgeprune reads "
                                 f"({STRUCTURE_FORMAT_VERSION})")
        vocabulary = data.get("vocabulary")
        return cls(heads=None if data.get("heads") is None else PruningPlan.from_dict(data["heads"]),
                   ffn_kept=None if data.get("ffn_kept") is None else [list(map(int, k)) for k in data["ffn_kept"]],
                   layers_removed=[int(i) for i in data.get("layers_removed") or []],
                   vocabulary=None if vocabulary is None else VocabularyMap(
                       int(vocabulary["original_size"]), [int(i) for i in vocabulary["kept_ids"]],
                       int(vocabulary["unk_id"])))


@dataclass
class StructureCompensation:
    """Mean outputs measured on the dense model, folded into biases for what a plan removes."""

    head_means: HeadOutputMeans | None = None
    neuron_means: list[torch.Tensor] | None = None  # per dense layer, each FFN neuron's mean activation


def apply_structure(model: nn.Module, plan: StructurePlan,
                    compensation: StructureCompensation | None = None) -> nn.Module:
    """Cut the dense `model` to `plan` in place and return it; the config stays true (per-layer head counts and
    FFN widths are recorded for `save`/`load`)."""
    layers = len(adapter_for(model).attention_blocks(model))
    if plan.heads is not None and len(plan.heads.kept_heads) != layers:
        raise UserInputError(f"the plan keeps heads of {len(plan.heads.kept_heads)} layers; the model has {layers}")
    gone = sorted(set(plan.layers_removed))
    if any(not 0 <= layer < layers for layer in gone) or len(gone) >= layers:
        raise UserInputError(f"the plan removes layers {plan.layers_removed}; the model has layers 0..{layers - 1} "
                             "and must keep one")
    compensation = compensation or StructureCompensation()
    if plan.vocabulary is not None:
        trim_vocabulary(model, plan.vocabulary)
    if plan.heads is not None:
        apply_plan(model, plan.heads, compensation=compensation.head_means)
    if plan.ffn_kept is not None:
        widths = intermediate_sizes(model)
        if len(plan.ffn_kept) != len(widths):
            raise UserInputError(f"the plan keeps FFN neurons of {len(plan.ffn_kept)} layers; the model has "
                                 f"{len(widths)}")
        removal = {layer: sorted(set(range(width)) - set(kept))
                   for layer, (width, kept) in enumerate(zip(widths, plan.ffn_kept, strict=True))
                   if len(kept) < width}
        remove_neurons(model, removal, means=compensation.neuron_means)
    if gone:
        adapter_for(model).remove_layers(model, gone)
    return model


def prune(model: nn.Module, plan: PruningPlan | StructurePlan,
          batches: Iterable[Mapping[str, torch.Tensor]] | None = None, *, compensate: bool | None = None) -> nn.Module:
    """Cut the dense `model` to `plan` in place, the way `fit` cuts its candidates, and return it.

    `compensate` (None: what fit does for this model, `default_scoring(model).compensate`, which is to
    compensate): each removed head's and FFN neuron's mean output on `batches` (keyword inputs of the model,
    e.g. calibration batches; a `labels` entry is ignored) is folded into the bias it feeds, measured on the
    model before any cut. `compensate=False` removes them outright and needs no batches.
    """
    structure = plan if isinstance(plan, StructurePlan) else StructurePlan(heads=plan)
    if compensate is None:
        compensate = default_scoring(model).compensate
    if not compensate:
        return apply_structure(model, structure)
    if batches is None:
        raise UserInputError("compensation measures the mean outputs of what is removed on calibration data: pass "
                             "batches (or compensate=False to remove outright)")
    batches = list(batches)
    head_means = measure_head_means(model, batches) if structure.heads is not None else None
    neuron_means = neuron_statistics(model, batches).means if structure.ffn_kept is not None else None
    return apply_structure(model, structure, StructureCompensation(head_means, neuron_means))


def ffn_kept_from_removal(widths: list[int], removal: dict[int, list[int]]) -> list[list[int]]:
    """Kept neurons per layer, from a removal such as `plan_neurons` returns (indices of the dense layers)."""
    return [sorted(set(range(width)) - set(removal.get(layer, ()))) for layer, width in enumerate(widths)]
