"""One plan for heads and FFN neurons together: a parameter budget spent across both, in every layer, from one
ranking.

Both kinds of unit add their output to the residual stream, and with mean compensation (their mean outputs
folded into the output bias: `edgeprune.pruning.compensation`, FLAP's bias compensation) what removing one loses
is the fluctuation of that output around its mean, E‖W_out(x − x̄)‖²: the "projected" fluctuation of a head
(`edgeprune.importance.fluctuation`) and the fluctuation of a neuron (`edgeprune.pruning.ffn.neuron_statistics`)
are the same quantity in the same units. So a plan can rank them together by fluctuation per parameter and
remove the cheapest until the budget is reached, which gives each layer its own head count and FFN width.

Neurons go in groups of `neuron_multiple` (the lowest-fluctuation neurons of a layer first), so that every FFN
width stays on the multiple a quantization recipe's group needs (4-bit groupwise weights with group 32: a width
not divisible by 32 leaves that linear in float). Grouped-query models are not planned jointly yet (a KV group's
heads would have to go together).
"""

from dataclasses import dataclass

import numpy as np
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.importance import HeadScores
from edgeprune.importance.fluctuation import Fluctuation
from edgeprune.models import adapter_for
from edgeprune.pruning.compensation import measure_head_means
from edgeprune.pruning.ffn import NeuronStatistics, ffn_layers, neuron_parameter_count, neuron_statistics
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.structure import StructureCompensation, StructurePlan, apply_structure

__all__ = ["JointPlan", "plan_joint", "prune_jointly"]


@dataclass
class JointPlan:
    """What a joint plan keeps (heads and FFN neurons per layer) and the parameters it removes, exactly."""

    structure: StructurePlan
    parameters_removed: int
    heads_removed: int
    neurons_removed: int


@dataclass(frozen=True)
class Unit:
    """A head, or a group of FFN neurons, that the plan may remove."""

    layer: int
    kind: str  # "head" or "neurons"
    members: tuple[int, ...]  # the head index, or the neuron indices (dense indices)
    score: float  # fluctuation lost when removed (compensated)
    parameters: int

    @property
    def cost(self) -> float:
        return self.score / self.parameters


def plan_joint(model: nn.Module, head_scores: HeadScores, neurons: NeuronStatistics, parameters: int,
               min_heads_per_layer: int = 1, neuron_multiple: int = 32, min_neurons_per_layer: int = 0
               ) -> JointPlan:
    """Remove at least `parameters` parameters from the dense `model` in heads and FFN neurons, cheapest
    fluctuation per parameter first (`head_scores`: projected fluctuation of the dense model's heads, not
    normalized per layer; `neurons`: `neuron_statistics` of the same model). Stops at the first unit that reaches
    the budget; a budget more than every removable unit holds is a UserInputError."""
    if parameters < 0:
        raise UserInputError(f"parameters to remove must be >= 0, got {parameters}")
    if neuron_multiple < 1:
        raise UserInputError(f"neuron_multiple must be >= 1, got {neuron_multiple}")
    units, num_heads, widths = removable_units(model, head_scores, neurons, neuron_multiple)
    heads_left = list(num_heads)
    neurons_left = list(widths)
    removed_heads: list[set[int]] = [set() for _ in num_heads]
    removed_neurons: list[set[int]] = [set() for _ in widths]
    removed = 0
    # neurons of a layer are grouped lowest fluctuation first, so their groups' costs rise within the layer and a
    # global sort by cost takes each layer's groups in that order
    for unit in sorted(units, key=lambda u: (u.cost, u.layer, u.kind, u.members)):
        if removed >= parameters:
            break
        if unit.kind == "head":
            if heads_left[unit.layer] <= min_heads_per_layer:
                continue
            heads_left[unit.layer] -= 1
            removed_heads[unit.layer].update(unit.members)
        else:
            if neurons_left[unit.layer] - len(unit.members) < max(min_neurons_per_layer, 1):
                continue
            neurons_left[unit.layer] -= len(unit.members)
            removed_neurons[unit.layer].update(unit.members)
        removed += unit.parameters
    if removed < parameters:
        raise UserInputError(f"a joint plan can remove at most {removed:,} parameters from this model (keeping "
                             f"{min_heads_per_layer} head(s) and a group of neurons per layer); asked for "
                             f"{parameters:,}")
    heads = PruningPlan(list(num_heads), [[h for h in range(total) if h not in gone]
                                          for total, gone in zip(num_heads, removed_heads, strict=True)],
                        criterion=head_scores.criterion, strategy="joint")
    ffn_kept = [[n for n in range(width) if n not in gone] for width, gone in zip(widths, removed_neurons,
                                                                                 strict=True)]
    return JointPlan(StructurePlan(heads, ffn_kept), removed, sum(map(len, removed_heads)),
                     sum(map(len, removed_neurons)))


def removable_units(model: nn.Module, head_scores: HeadScores, neurons: NeuronStatistics, neuron_multiple: int
                    ) -> tuple[list[Unit], list[int], list[int]]:
    """Every head and every group of `neuron_multiple` neurons of the dense model, with its score and the
    parameters it owns; and the dense head counts and FFN widths."""
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    feed_forwards = ffn_layers(model)
    if len(feed_forwards) != len(blocks):
        raise UserInputError("a joint plan needs one FFN block per attention layer")
    units: list[Unit] = []
    check_not_grouped_query(model)
    for block in blocks:
        if block.original_heads != tuple(range(block.num_heads)):
            raise UserInputError("plan_joint needs the dense model (this one has heads removed already)")
        per_head = adapter.removed_parameter_count(model, block.layer, [0])  # heads own equal parameters (MHA)
        scores = head_scores.scores[block.layer]
        units += [Unit(block.layer, "head", (h,), float(scores[h]), per_head) for h in range(block.num_heads)]
    widths = [block.width for block in feed_forwards]
    for layer, width in enumerate(widths):
        if width % neuron_multiple:
            raise UserInputError(f"layer {layer}'s FFN width {width} is not a multiple of {neuron_multiple}")
        per_neuron = neuron_parameter_count(model, layer)
        order = np.argsort(neurons.fluctuation[layer], kind="stable")
        for start in range(0, width, neuron_multiple):
            members = tuple(sorted(int(n) for n in order[start:start + neuron_multiple]))
            score = float(np.sum(neurons.fluctuation[layer][list(members)]))
            units.append(Unit(layer, "neurons", members, score, per_neuron * len(members)))
    return units, [block.num_heads for block in blocks], widths


def prune_jointly(model: nn.Module, batches: list[dict], parameters: int, min_heads_per_layer: int = 1,
                  neuron_multiple: int = 32) -> JointPlan:
    """Measure the dense `model` on `batches` (real calibration inputs), plan a joint removal of at least
    `parameters` parameters (`plan_joint`) and cut the model to it in place, each removed head's and neuron's mean
    output folded into its output bias. Returns the plan."""
    head_scores = Fluctuation("projected").score(model, iter(batches))
    neurons = neuron_statistics(model, iter(batches))
    plan = plan_joint(model, head_scores, neurons, parameters, min_heads_per_layer, neuron_multiple)
    means = measure_head_means(model, iter(batches))
    apply_structure(model, plan.structure, StructureCompensation(means, neurons.means))
    return plan


def check_not_grouped_query(model: nn.Module) -> None:
    """A joint plan ranks heads one by one: a grouped-query model's KV group would have to go together."""
    if any(block.num_kv_heads != block.num_heads for block in adapter_for(model).attention_blocks(model)):
        raise UserInputError("joint head and FFN plans (--params, --ratio) of grouped-query models are not built "
                             "yet; plan heads with `edgeprune score` and `prune --scores` (whole KV groups or the "
                             "same number from every group)")


def prunable_parameters(model: nn.Module) -> int:
    """The parameters a joint plan ranks: those every head and every FFN neuron of the dense `model` owns (what
    `prune --ratio` takes a fraction of)."""
    check_not_grouped_query(model)
    adapter = adapter_for(model)
    heads = sum(block.num_heads * adapter.removed_parameter_count(model, block.layer, [0])
                for block in adapter.attention_blocks(model))
    return heads + sum(ffn.width * neuron_parameter_count(model, layer) for layer, ffn in enumerate(ffn_layers(model)))

