"""Iterative re-scoring and learned hard-concrete gates, on a tiny BERT classifier."""

import copy

import numpy as np
import torch

from edgeprune.models import adapter_for
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.pruning import (
    Constraints,
    HardConcreteConfig,
    apply_plan,
    iterative_prune,
    learn_head_gates,
    plan_hard_concrete,
)
from tests.conftest import tiny_bert


def _classifier(dead_head=None):
    encoder = tiny_bert()
    if dead_head is not None:
        layer, head = dead_head
        with torch.no_grad():
            encoder.encoder.layer[layer].attention.output.dense.weight[:, head * 8:(head + 1) * 8] = 0
    torch.manual_seed(3)
    return EncoderClassifier(encoder, torch.nn.Linear(32, 3)).eval()


def _batches():
    generator = torch.Generator().manual_seed(5)
    data = []
    for _ in range(3):
        ids = torch.randint(1000, 30522, (8, 12), generator=generator)
        data.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                     "labels": torch.randint(0, 3, (8,), generator=generator)})
    return lambda: iter(data)


def test_iterative_removes_the_target_in_steps_and_runs_the_hook_each_step():
    model = _classifier()
    seen = []
    plan = iterative_prune(model, _batches(), remove=6, steps=3, criterion="gate-gradient",
                           between_steps=lambda m, step: seen.append((step, sum(
                               b.num_heads for b in adapter_for(m).attention_blocks(m)))))
    assert seen == [(0, 10), (1, 8), (2, 6)]
    assert plan.heads_removed == 6 and "iterative(steps=3" in plan.strategy
    assert [b.num_heads for b in adapter_for(model).attention_blocks(model)] == [len(k) for k in plan.kept_heads]
    # the plan, applied to a fresh dense copy, gives the same model
    fresh = apply_plan(_classifier(), plan)
    ids = torch.randint(1000, 30522, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids, torch.ones_like(ids))[0], model(ids, torch.ones_like(ids))[0])


def test_iterative_respects_the_minimum_per_layer():
    model = _classifier()
    plan = iterative_prune(model, _batches(), remove=9, steps=2, criterion="gate-gradient",
                           constraints=Constraints(min_heads_per_layer=2))
    assert [len(k) for k in plan.kept_heads] == [2, 2, 2]


def _match_dense(model):
    """Loss: distance of the gated model's embedding to the ungated one; only live heads matter to it."""
    reference = copy.deepcopy(model)

    def loss_fn(gated, batch):
        with torch.no_grad():
            target = reference(batch["input_ids"], batch["attention_mask"])[1]
        return 100 * (gated(batch["input_ids"], batch["attention_mask"])[1] - target).pow(2).mean()

    return loss_fn


def test_hard_concrete_gates_close_a_dead_head_and_keep_weights_frozen():
    model = _classifier(dead_head=(1, 2))
    before = copy.deepcopy(model.state_dict())
    config = HardConcreteConfig(steps=90, learning_rate=0.1, l0_weight=0.01)
    scores = learn_head_gates(model, _batches(), loss_fn=_match_dense(model), config=config)
    assert scores.criterion == "hard-concrete" and scores.scores.shape == (3, 4)
    assert np.nanargmin(scores.scores) == 1 * 4 + 2  # the head with no effect loses its gate most
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, before[name])
    plan = plan_hard_concrete(scores, config)
    assert plan.removed_heads == {1: [2]}  # live heads keep their gates under a light L0 penalty


def test_without_l0_pressure_hard_concrete_keeps_every_head():
    scores = learn_head_gates(_classifier(), _batches(), config=HardConcreteConfig(steps=10, l0_weight=0.0))
    assert plan_hard_concrete(scores).heads_removed == 0
